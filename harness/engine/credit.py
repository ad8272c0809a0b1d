"""Credit scored against ground truth: how well a method's final advantages rank the turns a benchmark labels.

A benchmark that knows which turn did what may label each step (``info["credit_label"]``, envs.base.CREDIT_LABELS);
the rollout carries the label into the batch column ``credit_label``. After the method has computed its per-token
advantages Ã, each turn gets one value, the mean of Ã over its response tokens, and the scores below are logged
(docs/credit.md):

- ``credit/fatal_auroc``: over lost episodes with a ``fatal`` turn and at least one other scored turn, the AUROC
  with which −Ã ranks the fatal turn above the episode's other turns, computed within each episode and averaged
  over episodes. A method that gives every turn of an episode one value (GRPO) scores 0.5 exactly.
- ``credit/detour_auroc``: over won episodes with at least one ``detour`` and one ``correct`` turn, the AUROC with
  which Ã ranks the correct turns above the detours, within each episode, averaged over episodes.

AUROC reads rank, not magnitude, and rank can come from position alone (a rule that weighs later turns more finds
a fatal turn that is always the last). So, on the same episodes:

- ``credit/fatal_auroc_position``: the fatal AUROC of position alone (a later turn blamed more: GRPO × (1 + εt));
  a method's fatal AUROC above it is credit, not recency;
- ``credit/fatal_share``: the share of a lost episode's negative advantage mass, Σ max(−Ã, 0) over its scored turns,
  that its fatal turn gets (GRPO: 1 / the number of scored turns; an oracle that blames the fatal turn only: 1);
- ``credit/neutral_share``: over episodes with a ``neutral`` turn (a choice that could not change the outcome), the
  share of the advantage mass Σ |Ã| those turns get (GRPO: their share of the turns; an oracle that skips them: 0).

``invalid`` turns take part in no score (the invalid-action penalty already singles them out). Two values
count as a tie (1/2) when they agree to within float32 rounding of a mean: a constant advantage averaged over
turns of different lengths must not rank them. A batch without labels gives no scores; labels but no eligible
episode give NaN (logged as a gap, not as a number).
"""
from __future__ import annotations

import torch
from torch import Tensor

from envs.base import CREDIT_LABELS
from harness.core.batch import StepBatch

FATAL_AUROC, DETOUR_AUROC = "credit/fatal_auroc", "credit/detour_auroc"
FATAL_AUROC_POSITION, FATAL_SHARE, NEUTRAL_SHARE = (
    "credit/fatal_auroc_position", "credit/fatal_share", "credit/neutral_share")
CODES = {label: code for code, label in enumerate(CREDIT_LABELS)}
NO_TURN = -1  # padding of the (episodes, turns) grid
TIE_RTOL, TIE_ATOL = 1e-5, 1e-9


def turn_values(advantages: Tensor, response_mask: Tensor) -> Tensor:
    """One value per row: the mean of Ã over the row's response tokens (float64); a (rows,) input is taken as is."""
    if advantages.dim() == 1:
        return advantages.double()
    mask = response_mask.to(advantages.device).double()
    return (advantages.double() * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def credit_metrics(batch: StepBatch, advantages: Tensor) -> dict[str, float]:
    """The ``credit/*`` scores of the module docstring and the number of episodes each averages over; {} when the
    benchmark labels no turn."""
    if "credit_label" not in batch:
        return {}
    values, labels, success = episode_grid(batch, turn_values(advantages, batch.response_mask).cpu())
    correct, detour = labels == CODES["correct"], labels == CODES["detour"]
    fatal, neutral = labels == CODES["fatal"], labels == CODES["neutral"]
    scored = correct | detour | fatal | neutral
    fatal_score, fatal_ok = episode_auroc(-values, fatal, scored & ~fatal)
    fatal_ok &= ~success
    position = torch.arange(labels.shape[1], dtype=torch.float64).expand(labels.shape)
    position_score, _ = episode_auroc(position, fatal, scored & ~fatal)
    detour_score, detour_ok = episode_auroc(values, correct, detour)
    detour_ok &= success
    fatal_share, share_ok = mass_share(values.neg().clamp(min=0.0), fatal, scored)
    share_ok &= ~success & fatal.any(1)
    neutral_mass, neutral_ok = mass_share(values.abs(), neutral, scored)
    neutral_ok &= neutral.any(1)
    return {FATAL_AUROC: _mean(fatal_score, fatal_ok), FATAL_AUROC_POSITION: _mean(position_score, fatal_ok),
            DETOUR_AUROC: _mean(detour_score, detour_ok), FATAL_SHARE: _mean(fatal_share, share_ok),
            NEUTRAL_SHARE: _mean(neutral_mass, neutral_ok),
            "credit/fatal_episodes": float(fatal_ok.sum()), "credit/detour_episodes": float(detour_ok.sum()),
            "credit/fatal_share_episodes": float(share_ok.sum()), "credit/neutral_episodes": float(neutral_ok.sum())}


def mass_share(mass: Tensor, part: Tensor, scored: Tensor) -> tuple[Tensor, Tensor]:
    """Per episode: the share of ``mass`` (non-negative, (episodes, turns), NaN on padding) over its ``scored``
    turns that its ``part`` turns hold; and whether that mass is above 0 (an episode with A = 0 has no share)."""
    total = torch.where(scored, mass, 0.0).sum(1)
    held = torch.where(part & scored, mass, 0.0).sum(1)
    positive = total > TIE_ATOL
    return held / torch.where(positive, total, 1.0), positive


def episode_grid(batch: StepBatch, values: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Rows laid out as (episodes, turns): values (NaN padding), label codes (NO_TURN padding), and each
    episode's success, (episodes,)."""
    unknown = sorted({label for label in batch.credit_label if label is not None and label not in CODES})
    if unknown:
        raise ValueError(f"credit_label values {unknown} are not among {list(CREDIT_LABELS)}")
    episode = torch.unique(batch.traj_id.cpu(), return_inverse=True)[1]
    turn = batch.step_idx.cpu()
    shape = (int(episode.max()) + 1, int(turn.max()) + 1)
    codes = torch.tensor([CODES.get(label, NO_TURN) for label in batch.credit_label], dtype=torch.long)
    grid_values = torch.full(shape, float("nan"), dtype=torch.float64).index_put_((episode, turn), values)
    grid_labels = torch.full(shape, NO_TURN, dtype=torch.long).index_put_((episode, turn), codes)
    success = torch.zeros(shape[0], dtype=torch.bool).index_put_((episode,), batch.success.cpu())
    return grid_values, grid_labels, success


def episode_auroc(scores: Tensor, positive: Tensor, negative: Tensor) -> tuple[Tensor, Tensor]:
    """Per episode (row of the (episodes, turns) grids): P(score of a positive turn > score of a negative turn)
    over all positive × negative pairs of the episode, a tie counting 1/2 (the Mann-Whitney AUROC); and whether
    the episode has at least one pair."""
    diff = scores[:, :, None] - scores[:, None, :]  # [e, i, j]: positive candidate i against negative candidate j
    scale = torch.maximum(scores.abs()[:, :, None], scores.abs()[:, None, :])
    tie = diff.abs() <= TIE_ATOL + TIE_RTOL * scale
    win = torch.where(tie, 0.5, (diff > 0).double())
    pairs = positive[:, :, None] & negative[:, None, :]
    count = pairs.sum((1, 2))
    total = torch.where(pairs, win, 0.0).sum((1, 2))
    return total / count.clamp(min=1), count > 0


def _mean(scores: Tensor, eligible: Tensor) -> float:
    return float(scores[eligible].mean()) if bool(eligible.any()) else float("nan")
