"""Vectorised segment and group reductions shared by the methods (no Python loop over rows or groups).

Rows are segments (turns); ids such as ``group_id`` or ``traj_id`` are arbitrary integers, turned into dense
indices ``0..n-1`` with :func:`dense_ids` so that sums and means become one ``index_add_`` each. Row-level
statistics are computed in float64 (they are cheap: one value per row) so that a group whose scores are all
equal gets an advantage of exactly 0, whatever the summation order.
"""
from __future__ import annotations

import torch
from torch import Tensor


def dense_ids(*keys: Tensor) -> tuple[Tensor, int]:
    """Map rows to dense ids ``0..n-1`` by the tuple of ``keys`` (each (rows,) integer)."""
    if len(keys) == 1:
        _, inverse = torch.unique(keys[0], return_inverse=True)
    else:
        _, inverse = torch.unique(torch.stack(keys, dim=1), dim=0, return_inverse=True)
    n = int(inverse.max()) + 1 if inverse.numel() else 0
    return inverse, n


def segment_sum(values: Tensor, index: Tensor, n: int) -> Tensor:
    return torch.zeros(n, dtype=values.dtype, device=values.device).index_add_(0, index, values)


def first_member(index: Tensor, n: int) -> Tensor:
    """Row index of the first row of each of the ``n`` groups."""
    rows = torch.arange(index.numel(), device=index.device)
    start = torch.full((n,), index.numel(), dtype=torch.long, device=index.device)
    return start.scatter_reduce_(0, index, rows, reduce="amin").clamp_(max=max(index.numel() - 1, 0))


def group_mean_std(values: Tensor, index: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """Mean, unbiased (Bessel) std and member count of ``values`` per group, in float64.

    The mean is taken about the group's first value, so identical values give a mean equal to them bit for
    bit (and a deviation of exactly 0). A one-member group gets std 0 here; callers decide its convention.
    """
    values = values.double()
    count = segment_sum(torch.ones_like(values), index, n)
    ref = values[first_member(index, n)]
    mean = ref + segment_sum(values - ref[index], index, n) / count.clamp(min=1)
    sq_dev = (values - mean[index]).square()
    std = (segment_sum(sq_dev, index, n) / (count - 1).clamp(min=1)).sqrt()
    return mean, std, count


def normalize_in_groups(
    values: Tensor,
    index: Tensor,
    n: int,
    by_std: bool,
    epsilon: float,
    singleton: str,
    stats_from: Tensor | None = None,
) -> Tensor:
    """``(v − mean_g) / (std_g + ε)`` (or ``v − mean_g``) per row, float64.

    ``stats_from`` (rows that define the statistics; default all) lets GRPO take one value per rollout.
    ``singleton`` is the convention for a one-member group: ``"zero_mean"`` = mean 0, std 1 (verl's GRPO,
    METHODS.md) or ``"zero"`` = the row's own value is the mean, so the result is 0 (GiGPO's step groups).
    """
    values = values.double()
    src = stats_from if stats_from is not None else torch.arange(values.numel(), device=values.device)
    mean, std, count = group_mean_std(values[src], index[src], n)
    single = count <= 1
    if singleton == "zero_mean":
        mean = torch.where(single, torch.zeros_like(mean), mean)
    elif singleton != "zero":
        raise ValueError(f"singleton={singleton!r}; choose 'zero_mean' or 'zero'")
    std = torch.where(single, torch.ones_like(std), std)
    centred = values - mean[index]
    if singleton == "zero":
        centred = torch.where(single[index], torch.zeros_like(centred), centred)
    return centred / (std[index] + epsilon) if by_std else centred


def masked_row_reduce(x: Tensor, mask: Tensor, how: str) -> Tensor:
    """Per-row ``sum`` or ``mean`` of ``x`` over ``mask`` (padding may hold NaN: it is never read)."""
    total = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum(dim=1)
    if how == "sum":
        return total
    if how == "mean":
        return total / mask.sum(dim=1).clamp(min=1).to(total.dtype)
    raise ValueError(f"reduce={how!r}; choose 'mean' or 'sum'")


def to_tokens(row_values: Tensor, mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Broadcast one value per row to its response tokens; 0 on padding."""
    return torch.where(mask, row_values.to(dtype)[:, None], torch.zeros((), dtype=dtype, device=mask.device))


def teacher_gap(batch) -> Tensor:
    """δ_t = q_t − s_t (METHODS.md notation), detached, 0 on padding. s_t = the collecting policy's log-prob."""
    q, s = batch.teacher_logp.detach(), batch.old_logp.detach()
    return torch.where(batch.response_mask, q - s, torch.zeros((), dtype=q.dtype, device=q.device))


def teacher_available(batch) -> Tensor:
    """Rows with a privileged context; all rows when the engine did not set the column (skills teachers)."""
    if "teacher_available" in batch:
        return batch.teacher_available
    return torch.ones(batch.num_rows, dtype=torch.bool, device=batch.response_mask.device)


def masked_stats(x: Tensor, mask: Tensor, prefix: str) -> dict[str, float]:
    """mean/std/min/max of ``x`` where ``mask``; empty selections report NaN-free zeros."""
    sel = x[mask].double()
    if sel.numel() == 0:
        return {f"{prefix}_mean": 0.0, f"{prefix}_std": 0.0, f"{prefix}_min": 0.0, f"{prefix}_max": 0.0}
    std = float(sel.std()) if sel.numel() > 1 else 0.0
    return {
        f"{prefix}_mean": float(sel.mean()),
        f"{prefix}_std": std,
        f"{prefix}_min": float(sel.min()),
        f"{prefix}_max": float(sel.max()),
    }


def group_share(flag: Tensor, group_id: Tensor) -> float:
    """Share of task groups where ``flag`` holds for at least one row."""
    index, n = dense_ids(group_id)
    if n == 0:
        return 0.0
    hit = segment_sum(flag.double(), index, n) > 0
    return float(hit.double().mean())


def apply_multiplier(adv_rows: Tensor, multiplier: Tensor, active: Tensor, mask: Tensor) -> Tensor:
    """Ã_t = A_i · m_t on ``active`` rows and A_i elsewhere (multiplier 1 = plain GRPO); 0 on padding.

    ``multiplier`` is (rows, response_len) or (rows,) for one value per segment.
    """
    if multiplier.dim() == 1:
        multiplier = multiplier[:, None]
    m = torch.where(active[:, None], multiplier.float(), torch.ones((), device=mask.device))
    return torch.where(mask, adv_rows.float()[:, None] * m, torch.zeros((), device=mask.device))


def multiplier_diagnostics(multiplier: Tensor, active: Tensor, mask: Tensor, available: Tensor) -> dict:
    """Multiplier statistics over the tokens of rows it acts on, and teacher availability."""
    if multiplier.dim() == 1:
        multiplier = multiplier[:, None].expand_as(mask)
    out = masked_stats(multiplier, mask & active[:, None], "multiplier")
    out["teacher_available_frac"] = float(available.double().mean())
    out["reweighted_row_frac"] = float(active.double().mean())
    return out
