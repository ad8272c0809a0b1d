"""RLSD: token reweighting of the GRPO advantage by a skills-conditioned teacher (methods/FORMULAS.md#rlsd)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.registry import register
from methods._segments import teacher_available, teacher_gap, token_counts, token_stats
from methods.grpo import GrpoBase, GrpoConfig, advantage_diagnostics


@dataclass
class RlsdConfig(GrpoConfig):
    lam: float = field(default=0.5, metadata={"help": "λ at step 0", "range": "[0, 1]"})
    warmdown_steps: int | None = field(default=50, metadata={
        "help": "λ decays linearly to 0 at this step; null keeps λ constant", "range": ">= 1"})
    clip_eps: float = field(default=0.2, metadata={
        "help": "ε_w: w_t is clipped to [1 − ε_w, 1 + ε_w]", "range": "[0, 1)"})
    clamp_gap: bool = field(default=False, metadata={
        "help": "clamp Δ_t to [−gap_clamp, gap_clamp] before exp (the optional reading)"})
    gap_clamp: float = field(default=5.0, metadata={"help": "bound of the optional clamp of Δ_t", "range": "> 0"})


def rlsd_lambda(lam: float, warmdown_steps: int | None, step: int) -> float:
    """λ(step) = λ₀ · (1 − step / warmdown_steps), 0 from ``warmdown_steps`` on (SDAR repo's RLSD trainer)."""
    if warmdown_steps is None:
        return lam
    if step >= warmdown_steps:
        return 0.0
    return lam * (1.0 - step / warmdown_steps)


@register("rlsd")
class Rlsd(GrpoBase):
    """Ã_t = A·[(1 − λ) + λ·clip(exp(sign(A)·Δ_t), 1 − ε_w, 1 + ε_w)], Δ_t = q_t − s_t
    (methods/FORMULAS.md#rlsd)."""

    Config = RlsdConfig
    requires = GrpoBase.requires + ("teacher_logp", "old_logp")
    teacher = "skills"
    grpo_limit = {"lam": 0.0}
    display_name = "RLSD"
    display_order = 40
    stress_options = {"lam": 1.0, "clip_eps": 0.9}

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        self.check_batch(batch)
        c = self.config
        adv = self.episode_advantage(batch)
        lam = rlsd_lambda(c.lam, c.warmdown_steps, step)
        available = teacher_available(batch)
        active = available & (adv != 0)
        mask = batch.response_mask
        diagnostics = advantage_diagnostics(adv, batch)
        gap = teacher_gap(batch)
        lengths = token_counts(mask)
        diagnostics.update(token_stats(gap, mask, active, "gap", lengths, minmax=False))
        # clip(exp(x), 1 − ε, 1 + ε) = exp(clip(x, log(1 − ε), log(1 + ε))); the optional clamp of Δ to ±gap_clamp
        # commutes with sign(A), so both become one clamp, done in place (the token-level work is memory-bound)
        low, high = math.log(1.0 - c.clip_eps), math.log(1.0 + c.clip_eps)
        if c.clamp_gap:
            low, high = max(low, -c.gap_clamp), min(high, c.gap_clamp)
        weight = gap.mul_(torch.sign(adv).to(gap.dtype)[:, None]).clamp_(low, high).exp_()
        w = token_stats(weight, mask, active, "w", lengths, pad=1.0)  # padding: gap 0 → weight exp(0) = 1
        diagnostics.update({f"multiplier_{k}": (1 - lam) + lam * w[f"w_{k}"] for k in ("mean", "min", "max")})
        diagnostics["multiplier_std"] = lam * w["w_std"]
        diagnostics["reweighted_row_frac"] = float(active.double().mean())
        diagnostics["lambda"] = lam
        # Ã = A(1 − λ) + Aλ·w on active rows; inactive rows get A + 0·w = A exactly (plain GRPO)
        base = torch.where(active, adv * (1.0 - lam), adv).float()[:, None]
        slope = torch.where(active, adv * lam, 0.0).float()[:, None]
        out = torch.addcmul(base, slope, weight)
        return torch.where(mask, out, 0.0), diagnostics
