"""Closed-form statistics for the tables: Student-t confidence intervals over seeds, and the per-matrix
aggregates of Agarwal et al., "Deep RL at the Edge of the Statistical Precipice" (NeurIPS 2021; library
``rliable``): interquartile mean and probability of improvement, computed as rliable computes them.

The bootstrap intervals around them resample training seeds, not eval episodes: ``paper_figures.bootstrap``.
"""
from __future__ import annotations

import numpy as np
from scipy import stats as scipy_stats


def mean_ci(values, confidence: float = 0.95) -> tuple[float, float, int]:
    """(mean, half-width of the two-sided Student-t CI, n) over the finite values.

    half-width = t_{(1+confidence)/2, n-1} · s / √n with s the Bessel-corrected sample std. One value has no
    spread estimate (half-width NaN); no value gives (NaN, NaN, 0).
    """
    array = np.asarray(values, dtype=float)
    array = array[np.isfinite(array)]
    n = int(array.size)
    if n == 0:
        return float("nan"), float("nan"), 0
    mean = float(array.mean())
    if n == 1:
        return mean, float("nan"), 1
    sem = float(array.std(ddof=1)) / np.sqrt(n)
    return mean, float(scipy_stats.t.ppf(0.5 + confidence / 2, n - 1) * sem), n


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean over all entries: the mean of the middle 50% (⌊n/4⌋ values cut each side).

    The same number as ``rliable.metrics.aggregate_iqm`` (scipy's ``trim_mean(.., 0.25, axis=None)``) without
    scipy's per-call argument handling, which dominates when the bootstrap calls it thousands of times.
    """
    flat = np.sort(np.asarray(scores, dtype=float), axis=None)
    cut = int(0.25 * flat.size)
    return float(flat[cut: flat.size - cut].mean())


def probability_of_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """P(X > Y) averaged over tasks, ties counted one half: mean_m [ P(X_m > Y_m) + ½ P(X_m = Y_m) ].

    The same quantity as ``rliable.metrics.probability_of_improvement`` (its per-task Mann-Whitney U / (n·m)),
    computed for all tasks at once instead of one scipy call per task: the bootstrap evaluates it thousands of
    times on hundreds of tasks, where rliable's loop takes minutes.
    """
    x = np.asarray(scores_x, dtype=float)[:, None, :]  # (n_x, 1, tasks)
    y = np.asarray(scores_y, dtype=float)[None, :, :]  # (1, n_y, tasks)
    if x.shape[2] != y.shape[2]:
        raise ValueError(f"score matrices need the same tasks: {x.shape[2]} vs {y.shape[2]} columns")
    per_task = (x > y).mean(axis=(0, 1)) + 0.5 * (x == y).mean(axis=(0, 1))
    return float(per_task.mean())


def score_distribution(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Fraction of all (seed, task) scores above each τ: ``rliable.library.score_distributions`` in one
    broadcast instead of one call per τ."""
    return (np.asarray(scores, dtype=float).reshape(-1, 1) > np.asarray(taus, dtype=float)[None, :]).mean(axis=0)


def bonferroni_confidence(m: int, overall: float = 0.95) -> float:
    """1 − (1 − overall)/m: each of a table's m intervals at this level, so that all m hold together with at least
    ``overall`` (Bonferroni). One rule for every table, so an interval and its "excludes 0" verdict never disagree,
    as they could with Holm's step-down p-values."""
    return 1 - (1 - overall) / max(int(m), 1)


def paired_t(diffs, m: int = 1, overall: float = 0.95) -> dict:
    """Paired comparison from per-seed differences (arm − control of the same seed): the unit is the difference,
    so what the seeds share (warm start, eval tasks, sampling seeds) cancels.

    Returns n, mean, sd (Bessel), half (Student-t half-width at ``bonferroni_confidence(m, overall)``), low, high,
    half95 (the unadjusted 95% half-width of this comparison alone), p (two-sided paired t-test) and p_adj =
    min(1, m·p). Constant differences have sd 0: a zero-width interval, p = 0 (or 1 when they are all 0).
    """
    array = np.asarray(diffs, dtype=float)
    array = array[np.isfinite(array)]
    confidence = bonferroni_confidence(m, overall)
    mean, half, n = mean_ci(array, confidence)
    out = {"n": n, "mean": mean, "sd": float(array.std(ddof=1)) if n > 1 else float("nan"), "half": half,
           "low": mean - half, "high": mean + half, "half95": mean_ci(array, 0.95)[1], "confidence": confidence,
           "m": int(m), "p": float("nan")}
    if n > 1:
        sem = out["sd"] / np.sqrt(n)
        out["p"] = (float(mean == 0.0) if sem == 0
                    else float(2 * scipy_stats.t.sf(abs(mean) / sem, n - 1)))
    out["p_adj"] = min(1.0, out["p"] * max(int(m), 1)) if np.isfinite(out["p"]) else float("nan")
    return out


def paired_t_power(n: int, gain: float, sd: float, m: int = 1, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test at level α/m with n seeds, for a true mean difference ``gain`` at a
    per-seed SD of differences ``sd``: P(|T| > t_crit) with T noncentral t (df n − 1, noncentrality gain·√n/sd)."""
    if n < 2:
        return 0.0
    crit = scipy_stats.t.ppf(1 - alpha / (2 * max(int(m), 1)), n - 1)
    nc = gain * np.sqrt(n) / sd
    return float(scipy_stats.nct.sf(crit, n - 1, nc) + scipy_stats.nct.cdf(-crit, n - 1, nc))


def seeds_needed_normal(gain: float, sd: float, m: int = 1, power: float = 0.8, alpha: float = 0.05) -> int:
    """n = ⌈((z_{1−α/(2m)} + z_{power}) · sd / gain)²⌉: the normal approximation (SD known), a lower bound."""
    z = scipy_stats.norm.ppf(1 - alpha / (2 * max(int(m), 1))) + scipy_stats.norm.ppf(power)
    return max(2, int(np.ceil((z * sd / gain) ** 2 - 1e-9)))


def seeds_needed(gain: float, sd: float, m: int = 1, power: float = 0.8, alpha: float = 0.05,
                 limit: int = 10_000) -> int:
    """The fewest seeds with which a paired t-test at α/m (Bonferroni over m comparisons) detects a true paired
    gain ``gain`` with probability ≥ ``power``, at a per-seed SD of differences ``sd`` (exact noncentral-t power;
    ``seeds_needed_normal`` is its closed-form approximation, which the SD being estimated pushes up by a few seeds).

    Why: with the SD of paired differences measured on a grid, it says whether the grid's seed count can resolve
    a gain of a stated size at all, before any method is read off it.
    """
    if not (gain > 0 and np.isfinite(gain)) or not (sd >= 0 and np.isfinite(sd)):
        raise ValueError(f"seeds_needed wants gain > 0 and sd ≥ 0, got gain={gain}, sd={sd}")
    if sd == 0:
        return 2  # no spread: two seeds give an interval, of width 0
    n = seeds_needed_normal(gain, sd, m, power, alpha)
    if n >= limit:  # far beyond any grid: the approximation says enough
        return n
    while paired_t_power(n, gain, sd, m, alpha) < power and n < limit:
        n += 1
    return n
