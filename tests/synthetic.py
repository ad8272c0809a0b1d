"""Synthetic StepBatches for method, loss and benchmark code (no model, no environment).

``batch_from_rows`` builds a small hand-written batch (one dict per segment); ``random_batch`` builds a large
realistic one: task groups of G rollouts, rollouts of 1..max_segments segments, repeated observations inside
a group (GiGPO step groups), some invalid actions, teacher log-probs near the student's.
Import as ``from synthetic import ...`` inside tests (pytest puts tests/ on sys.path).
"""
from __future__ import annotations

from typing import Sequence

import torch

from harness.core.batch import SUCCESS_STATE, StepBatch


def next_state(rows: Sequence[dict], won: str) -> list[int]:
    """next_obs_hash per row dict: the ``next`` key, else the obs of the rollout's next step, else SUCCESS_STATE
    after a won rollout (``won`` names the key that says so), else a final observation of the rollout's own."""
    obs = {(r["traj"], r["step"]): r.get("obs", r["step"]) for r in rows}
    return [r["next"] if "next" in r else obs.get((r["traj"], r["step"] + 1),
                                                  SUCCESS_STATE if r[won] else 10**6 + r["traj"]) for r in rows]


def batch_from_rows(rows: Sequence[dict], response_len: int | None = None) -> StepBatch:
    """One dict per segment row with keys: group, traj, step, ret (episode return), valid (bool, default True),
    tokens (number of response tokens, default 2), gap (δ_t per token, list or scalar, default 0), avail
    (teacher available, default True), reward (step reward, default 0), obs (obs hash, default step), next
    (next_obs_hash, default: see ``next_state``), old (old log-prob per token, default −1). Padding holds NaN in
    every log-prob column on purpose."""
    width = response_len or max(r.get("tokens", 2) for r in rows)
    n = len(rows)
    mask = torch.zeros(n, width, dtype=torch.bool)
    old = torch.full((n, width), float("nan"))
    teacher = torch.full((n, width), float("nan"))
    for i, r in enumerate(rows):
        k = r.get("tokens", 2)
        mask[i, :k] = True
        gap = torch.as_tensor(r.get("gap", 0.0), dtype=torch.float32).expand(k)
        old[i, :k] = torch.as_tensor(r.get("old", -1.0), dtype=torch.float32).expand(k)
        teacher[i, :k] = old[i, :k] + gap
    n_steps = {}
    for r in rows:
        n_steps[r["traj"]] = n_steps.get(r["traj"], 0) + 1
    return StepBatch(
        response_mask=mask,
        old_logp=old,
        ref_logp=old.clone(),
        teacher_logp=teacher,
        teacher_available=[r.get("avail", True) for r in rows],
        group_id=[r["group"] for r in rows],
        traj_id=[r["traj"] for r in rows],
        step_idx=[r["step"] for r in rows],
        n_steps=[n_steps[r["traj"]] for r in rows],
        episode_return=[float(r["ret"]) for r in rows],
        success=[r["ret"] > 0 for r in rows],
        step_reward=[float(r.get("reward", 0.0)) for r in rows],
        action_valid=[r.get("valid", True) for r in rows],
        obs_hash=[r.get("obs", r["step"]) for r in rows],
        next_obs_hash=next_state([dict(r, won=r["ret"] > 0) for r in rows], "won"),
    )


def random_batch(
    rows: int = 4096,
    response_len: int = 512,
    group_size: int = 8,
    max_segments: int = 50,
    seed: int = 0,
    success_rate: float = 0.4,
    invalid_rate: float = 0.1,
) -> StepBatch:
    """Rollouts of 1..max_segments segments in groups of ``group_size`` until ``rows`` rows exist (the last
    rollout is cut short to fit). Success gives reward 10 on the last step (ALFWorld's 10·won)."""
    g = torch.Generator().manual_seed(seed)
    lengths = []
    while sum(lengths) < rows:
        lengths.append(int(torch.randint(1, max_segments + 1, (1,), generator=g)))
    lengths[-1] -= sum(lengths) - rows
    n_traj = len(lengths)
    steps_per_traj = torch.tensor(lengths)
    traj_id = torch.repeat_interleave(torch.arange(n_traj), steps_per_traj)
    starts = torch.cumsum(steps_per_traj, 0) - steps_per_traj
    step_idx = torch.arange(rows) - starts[traj_id]
    group_of_traj = torch.arange(n_traj) // group_size
    won = torch.rand(n_traj, generator=g) < success_rate
    # a third of the groups all fail or all succeed, so A = 0 rows occur as in real runs
    uniform = torch.rand(group_of_traj.max() + 1, generator=g) < 1 / 3
    won = torch.where(uniform[group_of_traj], (group_of_traj % 2 == 0), won)
    group_id = group_of_traj[traj_id]
    is_last = step_idx == steps_per_traj[traj_id] - 1
    success = won[traj_id]
    tokens = torch.randint(1, response_len + 1, (rows,), generator=g)
    mask = torch.arange(response_len)[None, :] < tokens[:, None]
    old = -torch.rand(rows, response_len, generator=g) * 3
    teacher = old + torch.randn(rows, response_len, generator=g) * 0.5
    group_has_success = torch.zeros(int(group_of_traj.max()) + 1, dtype=torch.bool).index_put_(
        (group_of_traj,), won, accumulate=True
    )
    ref = old + torch.randn(rows, response_len, generator=g) * 0.1
    valid = torch.rand(rows, generator=g) >= invalid_rate
    obs = step_idx * 10 + torch.randint(0, 3, (rows,), generator=g)
    # the state after a step: the next step's observation; after the last, success or a final observation
    final = torch.where(success, SUCCESS_STATE, (step_idx + 1) * 10 + torch.randint(0, 3, (rows,), generator=g))
    labels = random_labels(g, traj_id, step_idx, steps_per_traj, success, valid)
    return StepBatch(
        response_mask=mask,
        old_logp=old,
        ref_logp=ref,
        teacher_logp=teacher,
        teacher_available=group_has_success[group_id],
        group_id=group_id * 7 + 3,  # ids need not be dense
        traj_id=traj_id * 5 + 1,
        step_idx=step_idx,
        n_steps=steps_per_traj[traj_id],
        episode_return=success.float() * 10.0,
        success=success,
        step_reward=(success & is_last).float() * 10.0,
        action_valid=valid,
        obs_hash=obs,
        next_obs_hash=torch.where(is_last, final, obs.roll(-1)),  # rows are rollout-major, in step order
        credit_label=labels,
    )


def random_labels(g, traj_id, step_idx, steps_per_traj, success, action_valid) -> list[str]:
    """Credit labels as a labelling benchmark gives them: one ``fatal`` turn at a random step of each lost rollout,
    a fifth of the other turns ``neutral``, ``invalid`` where the action was, the rest ``correct``."""
    fatal_step = (torch.rand(len(steps_per_traj), generator=g) * steps_per_traj).long()
    neutral = torch.rand(len(traj_id), generator=g) < 0.2
    fatal = ~success & (step_idx == fatal_step[traj_id])
    return ["invalid" if not v else "fatal" if f else "neutral" if n else "correct"
            for v, f, n in zip(action_valid.tolist(), fatal.tolist(), neutral.tolist())]


def ragged_batch(
    seed: int,
    max_segments: int = 50,
    max_group: int = 8,
    n_groups: int = 12,
    response_len: int = 16,
    reward: str = "sparse",
    scale: float = 10.0,
    step_major: bool = True,
) -> StepBatch:
    """Task groups of 1..max_group rollouts (singletons included) of 1..max_segments segments, rows in step-major
    order (all first segments, then all second ones, ...) unless ``step_major`` is False. Observations repeat across
    the rollouts of a group (step·10 + one of three choices), so histories of several steps are shared.
    ``reward``: ``sparse`` = ``scale``·won on the last step (ALFWorld), ``dense`` = U(0, 1) on every step."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, max_group + 1, (n_groups,), generator=g)
    sizes[0] = 1  # always one singleton group
    rows = []
    traj = 0
    for group, size in enumerate(sizes.tolist()):
        for _ in range(size):
            length = int(torch.randint(1, max_segments + 1, (1,), generator=g))
            won = bool(torch.rand(1, generator=g) < 0.5)
            for step in range(length):
                tokens = int(torch.randint(1, response_len + 1, (1,), generator=g))
                dense = float(torch.rand(1, generator=g))
                rows.append(dict(group=group * 3 + 1, traj=traj * 7 + 2, step=step, won=won, length=length,
                                 tokens=tokens, valid=bool(torch.rand(1, generator=g) > 0.15),
                                 obs=step * 10 + int(torch.randint(0, 3, (1,), generator=g)),
                                 reward=dense if reward == "dense" else scale * won * (step == length - 1)))
            traj += 1
    if step_major:
        rows.sort(key=lambda r: (r["step"], r["traj"]))
    n = len(rows)
    mask = torch.arange(response_len)[None, :] < torch.tensor([r["tokens"] for r in rows])[:, None]
    old = -torch.rand(n, response_len, generator=g) * 3
    teacher = old + torch.randn(n, response_len, generator=g) * 0.5
    returns: dict[int, float] = {}
    for r in rows:
        returns[r["traj"]] = returns.get(r["traj"], 0.0) + r["reward"]
    return StepBatch(
        response_mask=mask, old_logp=old, ref_logp=old.clone(), teacher_logp=teacher,
        teacher_available=[True] * n,
        group_id=[r["group"] for r in rows], traj_id=[r["traj"] for r in rows], step_idx=[r["step"] for r in rows],
        n_steps=[r["length"] for r in rows], episode_return=[returns[r["traj"]] for r in rows],
        success=[r["won"] for r in rows], step_reward=[r["reward"] for r in rows],
        action_valid=[r["valid"] for r in rows], obs_hash=[r["obs"] for r in rows],
        next_obs_hash=next_state(rows, "won"),
    )
