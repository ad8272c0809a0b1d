"""Oracle credit: positive controls that read the benchmark's ground-truth turn labels
(methods/FORMULAS.md#oracle-credit-positive-controls).

A benchmark on which a method that knows the answer cannot beat GRPO cannot rank credit-assignment methods; these
arms show how much better credit could do on the task at hand, as the frozen arm shows what no training does. They
keep GRPO's advantage A_i, its normalisation and its per-token scale, and change only *where* it lands:

- ``oracle_fatal``: in a lost episode with a turn that lost it (``fatal``, or an ``invalid`` action, which also ends
  the run), that turn keeps A_i and every other turn gets 0; won episodes, and lost ones with no such turn (cut off
  by the step limit), are GRPO's.
- ``oracle_decisive``: the same, and a turn whose choice could not change the outcome (``neutral``: a decoy, or a
  turn after the fatal one) gets 0 in every episode, won ones included.

Both are controls, not methods (``control = "positive"``): tables list them apart and never rank them. A benchmark
that labels no turns (``Benchmark.labels_turns``) is refused at start-up (harness/validation.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.registry import register
from methods._segments import dense_ids, to_tokens
from methods.grpo import GrpoBase, GrpoConfig, advantage_diagnostics

LOSING_LABELS = ("fatal", "invalid")  # a turn that ends the episode as a loss by itself (envs.base.CREDIT_LABELS)
NEUTRAL_LABEL = "neutral"


@dataclass
class OracleConfig(GrpoConfig):
    others: float = field(default=0.0, metadata={
        "help": "the share of A_i the turns the oracle does not credit keep (0: none; 1: GRPO exactly)",
        "range": "[0, 1]"})


def label_mask(labels: list, wanted: tuple[str, ...], device) -> Tensor:
    """(rows,) bool: the row's credit label is one of ``wanted``."""
    return torch.tensor([label in wanted for label in labels], dtype=torch.bool, device=device)


def oracle_weights(batch: StepBatch, zero_neutral: bool) -> Tensor:
    """(rows,) float64 weight w_t in {0, 1}: 1 where the oracle keeps A_i on the turn (FORMULAS.md, w_t)."""
    device = batch.traj_id.device
    losing = label_mask(batch.credit_label, LOSING_LABELS, device)
    traj, n = dense_ids(batch.traj_id)
    has_losing = torch.zeros(n, dtype=torch.bool, device=device).index_put_((traj,), losing, accumulate=True)
    blamed_only = ~batch.success.to(device) & has_losing[traj]  # lost, and the turn that lost it is known
    keep = torch.where(blamed_only, losing, torch.ones_like(losing))
    if zero_neutral:
        keep &= ~label_mask(batch.credit_label, (NEUTRAL_LABEL,), device)
    return keep.double()


class OracleBase(GrpoBase):
    Config = OracleConfig
    requires = GrpoBase.requires + ("success", "credit_label")
    control = "positive"
    keeps_sign = False  # the turns it does not credit get 0, whatever A_i
    grpo_limit = {"others": 1.0}
    zero_neutral = False

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        self.check_batch(batch)
        adv = self.episode_advantage(batch)
        weight = oracle_weights(batch, self.zero_neutral)
        others = self.config.others
        rows = adv * (weight + others * (1.0 - weight))
        diagnostics = advantage_diagnostics(rows, batch)
        diagnostics["credited_row_frac"] = float(weight.mean())
        return to_tokens(rows, batch.response_mask), diagnostics


@register("oracle_fatal")
class OracleFatal(OracleBase):
    """Ã_t = A_i · w_t, w_t = 1[turn t lost the episode] in a lost episode whose losing turn is labelled, else 1
    (methods/FORMULAS.md#oracle-credit-positive-controls, first formula)."""

    display_name = "Oracle: fatal turn (positive control)"
    display_order = 90_000


@register("oracle_decisive")
class OracleDecisive(OracleBase):
    """Ã_t = A_i · w_t · 1[turn t is not neutral]: oracle_fatal, and no credit to a choice that could not change the
    outcome, in won episodes too (methods/FORMULAS.md#oracle-credit-positive-controls, second formula)."""

    display_name = "Oracle: decisive turns (positive control)"
    display_order = 90_010
    zero_neutral = True
