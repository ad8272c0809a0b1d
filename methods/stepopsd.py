"""StepOPSD: step-level, sign-preserving shaping with a per-rollout credit budget
(methods/FORMULAS.md#stepopsd).

A reconstruction from the paper's text (no public code); every reading it leaves open is a Config flag.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.registry import register
from harness.core.typed import ConfigError
from methods._segments import (
    apply_multiplier,
    dense_ids,
    has_tokens,
    masked_row_reduce,
    masked_stats,
    multiplier_diagnostics,
    segment_sum,
    share_of_rows,
    teacher_available,
    teacher_gap,
)
from methods.grpo import GrpoBase, GrpoConfig, advantage_diagnostics


@dataclass
class StepOpsdConfig(GrpoConfig):
    lam_mix: float = field(default=0.1, metadata={"help": "λ_mix (0.3 also tried)", "range": ">= 0"})
    alpha: float = field(default=1.0, metadata={
        "help": "α: segment credit clipped to [−α, α] (0.5 also tried)", "range": "> 0"})
    floor: float = field(default=0.05, metadata={
        "help": "lower bound of the multiplier, keeps sign(Ã) = sign(A)", "range": "> 0"})
    reduce: Literal["sum", "mean"] = field(default="sum", metadata={
        "help": "e_k: sum (paper) or mean of δ_t over the segment's tokens"})
    budget_eps: float = field(default=1e-6, metadata={
        "help": "ε of the per-rollout budget normalisation", "range": "> 0"})


def budget_normalize(credit: Tensor, traj_id: Tensor, counted: Tensor, eps: float) -> Tensor:
    """ĉ_k = c_k / (mean_j |c_j| + ε) over the segments j of the same rollout that have a teacher (``counted``)."""
    traj, n = dense_ids(traj_id)
    weight = counted.to(credit.dtype)
    total = segment_sum(credit.abs() * weight, traj, n)
    members = segment_sum(weight, traj, n).clamp(min=1)
    return credit / (total / members + eps)[traj]


@register("stepopsd")
class StepOpsd(GrpoBase):
    """Ã_k = A·max(floor, 1 + λ_mix·sign(A)·ĉ_k), ĉ_k the budget-normalised clip(e_k, −α, α).

    e_k reduces δ_t over segment k; the teacher context is hindsight (a successful sibling's actions and the
    observation that followed this step). Rows without a teacher keep multiplier 1 and stay out of the budget.
    """

    Config = StepOpsdConfig
    requires = GrpoBase.requires + ("teacher_logp", "old_logp", "teacher_available")
    teacher = "hindsight"
    grpo_limit = {"lam_mix": 0.0}
    display_name = "StepOPSD"
    display_order = 60
    stress_options = {"lam_mix": 5.0}

    def __init__(self, config: StepOpsdConfig | None = None):
        super().__init__(config)
        c = self.config
        if c.floor <= 0.0 or c.alpha <= 0.0 or c.lam_mix < 0.0:
            raise ConfigError(f"stepopsd: need floor > 0 (keeps sign(Ã) = sign(A)), alpha > 0, lam_mix ≥ 0; got {c}")

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        self.check_batch(batch)
        c = self.config
        adv = self.episode_advantage(batch)
        mask = batch.response_mask
        available = teacher_available(batch)
        evidence = masked_row_reduce(teacher_gap(batch), mask, c.reduce).double()
        credit = evidence.clamp(-c.alpha, c.alpha)
        budgeted = budget_normalize(credit, batch.traj_id, available, c.budget_eps)
        multiplier = (1.0 + c.lam_mix * torch.sign(adv) * budgeted).clamp(min=c.floor)
        active = available & (adv != 0)
        acting = active & has_tokens(mask)
        diagnostics = advantage_diagnostics(adv, batch)
        diagnostics.update(multiplier_diagnostics(multiplier, acting, mask))
        diagnostics.update(masked_stats(evidence, acting, "gap"))
        diagnostics["floor_frac"] = share_of_rows(multiplier <= c.floor, acting)
        diagnostics["credit_clip_frac"] = share_of_rows(evidence.abs() > c.alpha, acting)
        return apply_multiplier(adv, multiplier, active, mask), diagnostics
