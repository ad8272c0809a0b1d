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
