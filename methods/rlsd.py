"""RLSD: token reweighting of the GRPO advantage by a skills-conditioned teacher (METHODS.md §RLSD)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from harness.batch import StepBatch
from harness.config import ConfigError
from harness.registry import register
from methods._segments import apply_multiplier, masked_stats, multiplier_diagnostics, teacher_available, teacher_gap
from methods.grpo import GrpoBase, GrpoConfig, advantage_diagnostics


@dataclass
class RlsdConfig(GrpoConfig):
    lam: float = 0.5  # λ at step 0
    warmdown_steps: int | None = 50  # λ decays linearly to 0 at this step; None keeps λ constant
    clip_eps: float = 0.2  # ε_w: w_t is clipped to [1 − ε_w, 1 + ε_w]
    clamp_gap: bool = False  # clamp Δ_t to [−gap_clamp, gap_clamp] before exp (the optional reading)
    gap_clamp: float = 5.0


def rlsd_lambda(lam: float, warmdown_steps: int | None, step: int) -> float:
    """λ(step) = λ₀ · (1 − step / warmdown_steps), 0 from ``warmdown_steps`` on (SDAR repo's RLSD trainer)."""
    if warmdown_steps is None:
        return lam
    if step >= warmdown_steps:
        return 0.0
    return lam * (1.0 - step / warmdown_steps)


@register("rlsd")
class Rlsd(GrpoBase):
    """Ã_t = A·[(1 − λ) + λ·clip(exp(sign(A)·Δ_t), 1 − ε_w, 1 + ε_w)], Δ_t = q_t − s_t (METHODS.md §RLSD)."""

    Config = RlsdConfig
    requires = GrpoBase.requires + ("teacher_logp", "old_logp")
    teacher = "skills"

    def __init__(self, config: RlsdConfig | None = None):
        super().__init__(config)
        c = self.config
        if not 0.0 <= c.lam <= 1.0 or not 0.0 <= c.clip_eps < 1.0:
            raise ConfigError(f"rlsd: need 0 ≤ lam ≤ 1 and 0 ≤ clip_eps < 1 (keeps sign(Ã) = sign(A)); got {c}")

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        self.check_batch(batch)
        c = self.config
        adv = self.episode_advantage(batch)
        lam = rlsd_lambda(c.lam, c.warmdown_steps, step)
        gap = teacher_gap(batch)
        if c.clamp_gap:
            gap = gap.clamp(-c.gap_clamp, c.gap_clamp)
        weight = torch.exp(torch.sign(adv).float()[:, None] * gap).clamp(1.0 - c.clip_eps, 1.0 + c.clip_eps)
        multiplier = (1.0 - lam) + lam * weight
        available = teacher_available(batch)
        active = available & (adv != 0)
        mask = batch.response_mask
        diagnostics = advantage_diagnostics(adv, batch)
        diagnostics.update(multiplier_diagnostics(multiplier, active, mask, available))
        diagnostics.update(masked_stats(gap, mask & active[:, None], "gap"))
        diagnostics["lambda"] = lam
        return apply_multiplier(adv, multiplier, active, mask), diagnostics
