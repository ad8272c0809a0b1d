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
from methods._segments import teacher_available
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

    Only ``logp`` (s_t) carries a gradient: dL/ds_t = −g_t (times the aggregation weight). Padding is
    replaced by 0 before any arithmetic, so NaN there reaches neither the value nor the gradient; there the
    gap is 0 and the gate sigmoid(0) = 0.5.
    """
    # where() after the difference: its backward sends exactly 0 to padding, whatever logp holds there
    diff = torch.where(mask, teacher_logp.detach() - logp, 0.0)
    gap = diff.detach()
    if beta == 0:  # a constant gate: no token tensor to build (memory-bound work)
        gate = torch.full((), 0.5, dtype=gap.dtype, device=gap.device).expand_as(gap)
        return aggregate(diff * 0.5, mask, agg_mode), gate, gap
    gate = gap.mul(beta).sigmoid_()
    return aggregate(gate * diff, mask, agg_mode), gate, gap


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
        # padding holds gap 0 and gate 0.5 exactly, so plain sums corrected for it give the masked statistics
        count = int(torch.count_nonzero(mask))
        padding, tokens = mask.numel() - count, max(count, 1)
        diagnostics = {
            "gate_mean": (float(gate.sum()) - 0.5 * padding) / tokens,
            "gate_active_ratio": int(torch.count_nonzero(gate > 0.5)) / tokens,
            "teacher_gap_mean": float(gap.sum()) / tokens,
            "distill_loss": float(loss.detach()),
        }
        return self.config.coef * loss, diagnostics


@register("sdar")
class Sdar(GatedDistillation):
    """GRPO + c·agg(sigmoid(β·δ_t)·(q_t − s_t)) (METHODS.md §SDAR)."""

    Config = SdarConfig

    @property
    def gate_beta(self) -> float:
        return self.config.beta
