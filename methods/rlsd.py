"""RLSD: token reweighting of the GRPO advantage by a skills-conditioned teacher (methods/FORMULAS.md#rlsd)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.registry import register
from methods._segments import (
    concat_moments,
    moment_stats,
    real_token_extremes,
    row_moments,
    teacher_available,
    teacher_gap,
)
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
        active = teacher_available(batch) & (adv != 0)
        mask = batch.response_mask
        diagnostics = advantage_diagnostics(adv, batch)
        # clip(exp(x), 1 − ε, 1 + ε) = exp(clip(x, log(1 − ε), log(1 + ε))); the optional clamp of Δ to ±gap_clamp
        # commutes with sign(A), so both become one clamp
        low, high = math.log(1.0 - c.clip_eps), math.log(1.0 + c.clip_eps)
        if c.clamp_gap:
            low, high = max(low, -c.gap_clamp), min(high, c.gap_clamp)
        sign = torch.sign(adv).float()[:, None]
        # Ã = A(1 − λ) + Aλ·w on active rows; inactive rows get A + 0·w = A exactly (plain GRPO)
        base = torch.where(active, adv * (1.0 - lam), adv).float()[:, None]
        slope = torch.where(active, adv * lam, 0.0).float()[:, None]
        out, gap, weight, lengths = reweight(batch, sign, base, slope, low, high)
        diagnostics.update(moment_stats(gap, mask.shape[1], active, "gap", lengths, 0.0, None))

        def exact_extremes():  # the full weight tensor, only where the padding's w = 1 may be an extreme; in
            # reweight's exp2 form, so that the extremes are those of the weights Ã was made with, bit for bit
            w = teacher_gap(batch).mul_(sign * LOG2_E).clamp_(low * LOG2_E, high * LOG2_E).exp2_()
            return real_token_extremes(w, mask, active, lengths)

        # padding: gap 0 → weight exp2(0) = 1
        w = moment_stats(weight, mask.shape[1], active, "w", lengths, 1.0, exact_extremes)
        acting = active & (lengths > 0)
        if bool(acting.any()):
            diagnostics.update({f"multiplier_{k}": (1 - lam) + lam * w[f"w_{k}"] for k in ("mean", "min", "max")})
            diagnostics["multiplier_std"] = lam * w["w_std"]
        else:  # nothing reweighted: zeros, as every method logs an empty selection (not the 1 − λ of w = 0)
            diagnostics.update(dict.fromkeys(("multiplier_mean", "multiplier_min", "multiplier_max", "multiplier_std"),
                                             0.0))
        diagnostics["reweighted_row_frac"] = float(acting.double().mean())
        diagnostics["lambda"] = lam
        return out, diagnostics


BLOCK_ROWS = 1024  # a block's (1024 × response_len) float32 passes stay in a 32 MiB L3 cache; smaller blocks pay
# more per-call overhead than they gain in cache (4,096 × 512 after the SDAR function ran: 6.0 ms at 512 rows, 5.6 at
# 1,024, 6.0 at 2,048; 6.9 ms at 128, 5.9 at 4,096 run back to back)
LOG2_E = 1.0 / math.log(2.0)


def reweight(batch: StepBatch, sign: Tensor, base: Tensor, slope: Tensor, low: float, high: float):
    """(Ã = base + slope·exp(clamp(sign·δ, low, high)), 0 on padding; row moments of δ; row moments and extremes of
    the weight; response tokens per row). Why it is written this way (measured on one AVX-512 core, torch 2.13,
    4,096 × 512 tokens):

    - rows go in blocks of BLOCK_ROWS, so each block's passes run in cache instead of memory, and every pass after
      the subtraction runs in place in the output's block;
    - exp(x) is computed as exp2(x·log₂e), the factor folded into the sign and the bounds: torch's float32 exp2
      takes 0.65 ms where exp takes 1.7 ms (the results differ by float32 rounding, ~1e-7 relative);
    - padding is zeroed by multiplying with the mask converted once per block to float32 (20 µs a 512 × 512 block,
      then 22 µs a product and 15 µs for the token counts), not with the mask viewed as uint8 (44 µs a product,
      31 µs a count) nor with ``torch.where`` on the bool mask (590 µs). A product keeps NaN or ±inf that sat on
      padding, so the blocks whose δ row sums are not finite are redone with ``torch.where``: one check for the
      whole batch after the loop, as each block's own check (a sync on a 1,024-value reduction) cost ~30 µs."""
    mask = batch.response_mask
    out = torch.empty(mask.shape, dtype=torch.float32, device=mask.device)
    scaled_sign, low2, high2 = sign * LOG2_E, low * LOG2_E, high * LOG2_E

    def block_pass(block: slice, exact_padding: bool):
        keep = mask[block].view(torch.uint8).to(torch.float32)
        result = out[block]
        gap = _masked_gap(batch, block, keep, into=result, exact_padding=exact_padding)
        gap_moments = row_moments(gap, minmax=False)  # before the weight's passes overwrite δ in place
        weight = result.mul_(scaled_sign[block]).clamp_(low2, high2).exp2_()
        weight_moments = row_moments(weight)
        # weight·slope + base as two roundings, not addcmul's: the published grid's runs were made so (and addcmul
        # is the slower of the two on this CPU: 114 µs against 40 µs a block)
        weight.mul_(slope[block]).add_(base[block]).mul_(keep)
        return gap_moments, weight_moments, keep.sum(dim=1)  # counts exact below 2²⁴ tokens

    blocks = [slice(start, min(start + BLOCK_ROWS, mask.shape[0])) for start in range(0, mask.shape[0], BLOCK_ROWS)]
    parts = [block_pass(block, exact_padding=False) for block in blocks]
    gap = concat_moments([part[0] for part in parts])
    finite = torch.isfinite(gap.total)
    if not bool(finite.all()):  # NaN or ±inf somewhere: on padding it must not count
        parts = [part if bool(finite[block].all()) else block_pass(block, exact_padding=True)
                 for block, part in zip(blocks, parts)]
        gap = concat_moments([part[0] for part in parts])
    weight = concat_moments([part[1] for part in parts])
    return out, gap, weight, torch.cat([part[2] for part in parts]).to(torch.int32)


def _masked_gap(batch: StepBatch, block: slice, keep: Tensor, into: Tensor, exact_padding: bool) -> Tensor:
    """Writes δ = q − s on the block's response tokens into ``into`` and returns it, with 0 on the padding: by a
    product with the mask, which leaves NaN where the padding held NaN or ±inf, or with ``exact_padding`` by a
    select, which gives 0 whatever the padding holds."""
    teacher, student = batch.teacher_logp[block].detach(), batch.old_logp[block].detach()
    if exact_padding:
        zero = torch.zeros((), dtype=into.dtype, device=into.device)
        return into.copy_(torch.where(keep.bool(), teacher - student, zero))
    return torch.sub(teacher, student, out=into).mul_(keep)
