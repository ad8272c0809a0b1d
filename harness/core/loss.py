"""The policy loss: PPO clip with verl's dual clip, KL-to-reference estimators, verl's aggregation modes, and
the method's optional auxiliary term, combined by :func:`policy_loss` so the trainer makes one call.

Semantics follow verl's ``core_algos.py`` (``compute_policy_loss_vanilla``, ``kl_penalty``, ``agg_loss``);
the protocol (methods/FORMULAS.md#policy-loss): ε = 0.2, dual-clip c = 3, k3 KL with coefficient 0.01, token-mean.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor

if TYPE_CHECKING:
    from harness.config_sections import TrainConfig
    from harness.core.batch import StepBatch
    from harness.core.registry import Method

AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
AGG_MODES: tuple[str, ...] = AggMode.__args__
KL_ESTIMATORS = ("k1", "k2", "k3")


def aggregate(loss_mat: Tensor, mask: Tensor, mode: AggMode = "token-mean", scale: float | None = None) -> Tensor:
    """Reduce a (rows, response_len) loss to a scalar as verl's ``agg_loss`` does.

    token-mean: Σ_masked / n_tokens. seq-mean-token-mean: mean over rows with a token of the row's token mean.
    seq-mean-token-sum: mean over rows with a token of the row's token sum. seq-mean-token-sum-norm: Σ_masked /
    ``scale`` (verl's ``loss_scale_factor``; default the response length, as verl). Empty batches give 0.
    """
    # where(), not a product: padding may hold NaN or inf, which must not reach the value or the gradient
    masked = torch.where(mask.bool(), loss_mat, torch.zeros((), dtype=loss_mat.dtype, device=loss_mat.device))
    tokens_per_row = mask.sum(dim=-1, dtype=torch.int32)
    scale = scale if scale is not None else mask.shape[-1]
    return aggregate_row_sums(masked.sum(dim=-1), tokens_per_row, mode, scale)


def aggregate_row_sums(row_sums: Tensor, tokens_per_row: Tensor, mode: AggMode, scale: float) -> Tensor:
    """:func:`aggregate` from each row's loss sum and token count; ``scale`` is used by seq-mean-token-sum-norm.

    A caller that forms the row sums without a masked (rows, tokens) copy, or that drops whole rows by giving
    them 0 tokens, saves memory-bound passes over the token tensor.
    """
    if mode == "token-mean":  # an exact integer count, whatever the loss dtype
        return row_sums.sum() / max(int(tokens_per_row.sum()), 1)
    tokens_per_row = tokens_per_row.to(row_sums.dtype)
    rows_with_tokens = (tokens_per_row > 0).to(row_sums.dtype)
    if mode == "seq-mean-token-sum":
        return (row_sums * rows_with_tokens).sum() / rows_with_tokens.sum().clamp(min=1)
    if mode == "seq-mean-token-mean":
        row_means = row_sums / tokens_per_row.clamp(min=1)
        return (row_means * rows_with_tokens).sum() / rows_with_tokens.sum().clamp(min=1)
    if mode == "seq-mean-token-sum-norm":
        return row_sums.sum() / scale
    raise ValueError(f"loss_agg_mode={mode!r} is not one of {list(AGG_MODES)}")


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    return aggregate(x, mask, "token-mean")


def ppo_clip_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_ratio: float = 0.2,
    clip_ratio_c: float = 3.0,
    agg_mode: AggMode = "token-mean",
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate with dual clip (Ye et al. 2019, verl's ``compute_policy_loss_vanilla``).

    ℓ_t = max(−A·r, −A·clip(r, 1 − ε, 1 + ε)), r = exp(logp − old_logp) (log-ratio clamped to ±20); for A < 0
    the loss is further capped at −A·c. Returns the aggregated loss and clip statistics.
    """
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 for dual-clip PPO (verl); got {clip_ratio_c}")
    # padding may hold NaN log-probs: keep it out of the ratio so no NaN reaches the gradient
    log_ratio = torch.where(mask, logp - old_logp, torch.zeros((), dtype=logp.dtype, device=logp.device))
    log_ratio = log_ratio.clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_ratio, 1.0 + clip_ratio)
    clip_loss = torch.maximum(unclipped, clipped)
    dual_cap = -advantages * clip_ratio_c
    per_token = torch.where(advantages < 0, torch.minimum(clip_loss, dual_cap), clip_loss)
    loss = aggregate(per_token, mask, agg_mode)
    with torch.no_grad():
        metrics = {
            "pg_loss": float(loss),
            "pg_clipfrac": float(masked_mean((clipped > unclipped).float(), mask)),
            "pg_clipfrac_lower": float(masked_mean(((clip_loss > dual_cap) & (advantages < 0)).float(), mask)),
            "ppo_kl": float(masked_mean(-log_ratio, mask)),
        }
    return loss, metrics


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str = "k3") -> Tensor:
    """Per-token KL(π_θ ‖ π_ref) estimate (Schulman 2020; verl's ``kl_penalty``).

    k1 = logp − ref; k2 = ½(logp − ref)²; k3 (low variance) = exp(ref − logp) − (ref − logp) − 1, with the
    log-ratio clamped to ±20 and the result to [−10, 10] as in verl.
    """
    if kind == "k1":
        return logp - ref_logp
    if kind == "k2":
        return 0.5 * (logp - ref_logp).square()
    if kind == "k3":
        log_ratio = (ref_logp - logp).clamp(-20.0, 20.0)
        return (torch.exp(log_ratio) - log_ratio - 1.0).clamp(-10.0, 10.0)
    raise ValueError(f"kl estimator {kind!r} is not one of {list(KL_ESTIMATORS)}")


def policy_loss(
    batch: "StepBatch", logp: Tensor, advantages: Tensor, method: "Method", train_cfg: "TrainConfig", step: int = 0
) -> tuple[Tensor, dict[str, float]]:
    """L = L_PPO(A) + kl_coef · agg(KL(π_θ ‖ π_ref)) + the method's auxiliary term
    (methods/FORMULAS.md#policy-loss; the auxiliary term of SDAR: methods/FORMULAS.md#sdar).

    ``logp``: student log-probs with grad, (rows, response_len), on the rows of ``batch``. Metric keys are
    ``actor/…`` for the PPO and KL terms and ``method/…`` for the method's auxiliary diagnostics.
    """
    needs = ["old_logp", "response_mask"] + (["ref_logp"] if train_cfg.kl_coef else [])
    batch.require(needs, who=f"policy_loss (train.kl_coef={train_cfg.kl_coef})")
    mask = batch.response_mask
    if logp.shape != mask.shape or advantages.shape != mask.shape:
        raise ValueError(
            f"logp {tuple(logp.shape)} and advantages {tuple(advantages.shape)} must match the batch's "
            f"response_mask {tuple(mask.shape)}"
        )
    loss, pg_metrics = ppo_clip_loss(
        logp, batch.old_logp, advantages, mask, train_cfg.clip_ratio, train_cfg.clip_ratio_c, train_cfg.loss_agg_mode
    )
    metrics = {f"actor/{k}": v for k, v in pg_metrics.items()}
    if train_cfg.kl_coef:
        ref = torch.where(mask, batch.ref_logp, logp.detach())  # padding: KL 0, never NaN
        kl = aggregate(kl_penalty(logp, ref, train_cfg.kl_estimator), mask, train_cfg.loss_agg_mode)
        loss = loss + train_cfg.kl_coef * kl
        metrics["actor/kl_loss"] = float(kl.detach())
    aux = method.aux_loss(batch, logp, step)
    if aux is not None:
        aux_term, aux_metrics = aux
        loss = loss + aux_term
        metrics["actor/aux_loss"] = float(aux_term.detach())
        metrics.update({f"method/{k}": v for k, v in aux_metrics.items()})
    metrics["actor/loss"] = float(loss.detach())
    return loss, metrics
