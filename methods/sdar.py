"""SDAR: GRPO advantages plus a confidence-gated distillation loss toward a skills-conditioned teacher.

METHODS.md §SDAR: g_t = sigmoid(β·δ_t) (detached), L_SDAR = agg_t(g_t·(q_t − s_t)) with the gradient through the
student log-probs s_t only, total loss L = L_GRPO + c·L_SDAR. β = 0 (g ≡ 0.5) is the ``grpo_opsd`` baseline.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from harness.batch import StepBatch
from harness.loss import AggMode, aggregate
from harness.registry import register
from methods._segments import masked_stats, teacher_available
from methods.grpo import GrpoBase, GrpoConfig


@dataclass
class GrpoOpsdConfig(GrpoConfig):
    coef: float = 0.01  # c: weight of the distillation term (SDAR paper scripts)
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = (
        "token-mean"
    )


@dataclass
class SdarConfig(GrpoOpsdConfig):
    beta: float = 5.0  # β: sharpness of the gate


def gated_distillation(
    logp: Tensor, teacher_logp: Tensor, mask: Tensor, beta: float, agg_mode: AggMode
) -> tuple[Tensor, Tensor, Tensor]:
    """(L_SDAR, gate g_t, gap δ_t): L = agg(g_t·(q_t − s_t)), g_t = sigmoid(β·(q_t − s_t)) detached.

    Only ``logp`` (s_t) carries a gradient: d L / d s_t = −g_t (times the aggregation weight).
    """
    teacher = teacher_logp.detach()
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    gap = torch.where(mask, teacher - logp.detach(), zero)
    gate = torch.sigmoid(beta * gap)
    # where() keeps NaN/inf that padding might hold out of both the value and the gradient
    per_token = torch.where(mask, gate * (torch.where(mask, teacher, zero) - logp), zero)
    return aggregate(per_token, mask, agg_mode), gate, gap


class GatedDistillation(GrpoBase):
    """Advantages are plain GRPO; the method's signal is the auxiliary loss."""

    requires = GrpoBase.requires + ("teacher_logp",)
    teacher = "skills"

    @property
    def gate_beta(self) -> float:
        raise NotImplementedError

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        tokens, _, diagnostics = self.grpo_advantages(batch)
        diagnostics["teacher_available_frac"] = float(teacher_available(batch).double().mean())
        return tokens, diagnostics

    def aux_loss(self, batch: StepBatch, logp: Tensor, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        batch.require(self.requires, who=f"method {self.name!r}")
        # rows without a privileged context get no distillation term (multiplier 1 = plain GRPO)
        mask = batch.response_mask & teacher_available(batch)[:, None]
        loss, gate, gap = gated_distillation(logp, batch.teacher_logp, mask, self.gate_beta, self.config.loss_agg_mode)
        diagnostics = masked_stats(gate, mask, "gate")
        diagnostics["gate_active_ratio"] = float(((gate > 0.5) & mask).sum() / mask.sum().clamp(min=1))
        diagnostics["teacher_gap_mean"] = masked_stats(gap, mask, "gap")["gap_mean"]
        diagnostics["distill_loss"] = float(loss.detach())
        return self.config.coef * loss, diagnostics


@register("sdar")
class Sdar(GatedDistillation):
    """GRPO + c·agg(sigmoid(β·δ_t)·(q_t − s_t)) (METHODS.md §SDAR)."""

    Config = SdarConfig

    @property
    def gate_beta(self) -> float:
        return self.config.beta
