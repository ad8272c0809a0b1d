"""SDAR: GRPO advantages plus a confidence-gated distillation loss toward a skills-conditioned teacher.

methods/FORMULAS.md#sdar: g_t = sigmoid(β·(q_t − logp_t)) (detached), L_SDAR = agg_t(g_t·(q_t − logp_t)) with the
gradient through the student log-probs logp_t of the update's forward pass only, total loss L = L_GRPO + c·L_SDAR.
β = 0 (g ≡ 0.5) is the ``grpo_opsd`` baseline.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.loss import AggMode, aggregate_row_sums
from harness.core.registry import register
from methods._segments import teacher_available, token_counts
from methods.grpo import GrpoBase, GrpoConfig


@dataclass
class GrpoOpsdConfig(GrpoConfig):
    coef: float = field(default=0.01, metadata={
        "help": "c: weight of the distillation term (SDAR paper scripts)", "range": ">= 0"})
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = (
        field(default="token-mean", metadata={"help": "aggregation of the distillation term (verl's agg_loss)"})
    )


@dataclass
class SdarConfig(GrpoOpsdConfig):
    beta: float = field(default=5.0, metadata={
        "help": "β: sharpness of the gate sigmoid(β·gap)", "range": "(-inf, inf)"})


def gated_distillation(
    logp: Tensor, teacher_logp: Tensor, mask: Tensor, beta: float, agg_mode: AggMode, rows: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(L_SDAR, gate g_t, gap δ_t, tokens per row): L = agg(g_t·(q_t − s_t)), g_t = sigmoid(β·(q_t − s_t)),
    detached.

    Only ``logp`` (s_t) carries a gradient: dL/ds_t = −g_t (times the aggregation weight). Padding, and every
    token of a row outside ``rows`` (default: all rows), is replaced by 0 before any arithmetic, so NaN there
    reaches neither the value nor the gradient; there the gap is 0 and the gate sigmoid(0) = 0.5.
    """
    # where() after the difference: its backward sends exactly 0 to padding, whatever logp holds there, and
    # every product below is then already 0 on padding
    diff = torch.where(mask, teacher_logp.detach() - logp, 0.0)
    tokens_per_row = token_counts(mask)
    if rows is not None and not bool(rows.all()):
        # row-level selection: far cheaper than and-ing a (rows, tokens) mask or boolean-indexing the rows
        diff.index_fill_(0, torch.nonzero(~rows).squeeze(1), 0.0)
        tokens_per_row = tokens_per_row * rows
    gap = diff.detach()
    scale = mask.shape[-1]
    if beta == 0:  # a constant gate: no token tensor to build (memory-bound work)
        gate = torch.full((), 0.5, dtype=gap.dtype, device=gap.device).expand_as(gap)
        return aggregate_row_sums(diff.sum(dim=-1) * 0.5, tokens_per_row, agg_mode, scale), gate, gap, tokens_per_row
    gate = gap.mul(beta).sigmoid_()
    # a row-wise dot product: no (rows, tokens) product tensor is built
    loss = aggregate_row_sums(torch.linalg.vecdot(gate, diff), tokens_per_row, agg_mode, scale)
    return loss, gate, gap, tokens_per_row


def _gate_open_count(gap: Tensor, beta: float) -> int:
    """Tokens with sigmoid(β·δ) > 0.5, i.e. β·δ > 0: comparing the gap skips a pass over the gate tensor."""
    if beta == 0:
        return 0
    return int(torch.count_nonzero(gap > 0 if beta > 0 else gap < 0))


class GatedDistillation(GrpoBase):
    """Advantages are plain GRPO; the method's signal is the auxiliary loss."""

    requires = GrpoBase.requires + ("teacher_logp",)
    teacher = "skills"
    grpo_limit = {"coef": 0.0}  # the advantages are GRPO's at any setting; the limit switches the loss term off

    @property
    def gate_beta(self) -> float:
        raise NotImplementedError

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        tokens, _, diagnostics = self.grpo_advantages(batch)
        return tokens, diagnostics

    def aux_loss(self, batch: StepBatch, logp: Tensor, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        batch.require(self.requires, who=f"method {self.name!r}")
        # rows without a privileged context get no distillation term (multiplier 1 = plain GRPO)
        loss, gate, gap, tokens_per_row = gated_distillation(
            logp, batch.teacher_logp, batch.response_mask, self.gate_beta, self.config.loss_agg_mode,
            rows=teacher_available(batch),
        )
        # unscored tokens hold gap 0 and gate 0.5 exactly, so plain sums corrected for them give the statistics
        count = int(tokens_per_row.sum())
        padding, tokens = gap.numel() - count, max(count, 1)
        diagnostics = {
            "gate_mean": (float(gate.sum()) - 0.5 * padding) / tokens,
            "gate_active_ratio": _gate_open_count(gap, self.gate_beta) / tokens,
            "teacher_gap_mean": float(gap.sum()) / tokens,
            "distill_loss": float(loss.detach()),
        }
        return self.config.coef * loss, diagnostics


@register("sdar")
class Sdar(GatedDistillation):
    """GRPO + c·agg(sigmoid(β·(q_t − logp_t))·(q_t − logp_t)) (methods/FORMULAS.md#sdar)."""

    Config = SdarConfig
    display_name = "SDAR"
    display_order = 50

    @property
    def gate_beta(self) -> float:
        return self.config.beta
