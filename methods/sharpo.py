"""SHARPO: segment-level hindsight advantage reweighting (arXiv 2610.00838; methods/FORMULAS.md#sharpo).

A reconstruction from the paper's text (no public code); every reading it leaves open is a Config flag.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.registry import register
from methods._segments import (
    apply_multiplier,
    group_share,
    has_tokens,
    masked_row_reduce,
    masked_stats,
    multiplier_diagnostics,
    teacher_available,
    teacher_gap,
)
from methods.grpo import GrpoBase, GrpoConfig, advantage_diagnostics


@dataclass
class SharpoConfig(GrpoConfig):
    lam: float = field(default=0.05, metadata={"help": "λ (paper's best; 0.2 also reported)", "range": "[0, 1]"})
    tau: float = field(default=1.0, metadata={"help": "τ: temperature of the segment weight", "range": "> 0"})
    reduce: Literal["mean", "sum"] = field(default="mean", metadata={
        "help": "ḡ_k: mean (paper) or sum of δ_t over the segment's tokens"})
    signed: bool = field(default=True, metadata={
        "help": "w_k uses sign(A_i)·ḡ_k; false drops sign(A) (a third-party reading)"})


@register("sharpo")
class Sharpo(GrpoBase):
    """m_k = (1 − λ) + λ·2·sigmoid(sign(A_i)·ḡ_k / τ), Ã_t = A_i·m_k on every token of segment k.

    The teacher sees the actions of a successful sibling rollout; where the group has none
    (``teacher_available`` False) or A_i = 0 the multiplier is 1 (plain GRPO).
    """

    Config = SharpoConfig
    requires = GrpoBase.requires + ("teacher_logp", "old_logp", "teacher_available")
    teacher = "successful_sibling"
    grpo_limit = {"lam": 0.0}
    display_name = "SHARPO"
    display_order = 70
    stress_options = {"lam": 1.0, "tau": 0.1}

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        self.check_batch(batch)
        c = self.config
        adv = self.episode_advantage(batch)
        mask = batch.response_mask
        segment_gap = masked_row_reduce(teacher_gap(batch), mask, c.reduce).double()
        direction = torch.sign(adv) if c.signed else torch.ones_like(adv)
        weight = 2.0 * torch.sigmoid(direction * segment_gap / c.tau)
        multiplier = (1.0 - c.lam) + c.lam * weight
        available = teacher_available(batch)
        active = available & (adv != 0)
        acting = active & has_tokens(mask)
        diagnostics = advantage_diagnostics(adv, batch)
        diagnostics.update(multiplier_diagnostics(multiplier, acting, mask))
        diagnostics.update(masked_stats(segment_gap, acting, "gap"))
        diagnostics["teacher_group_frac"] = group_share(available, batch.group_id)
        return apply_multiplier(adv, multiplier, active, mask), diagnostics
