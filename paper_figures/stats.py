"""Statistics for the tables: Student-t confidence intervals over seeds, and rliable's interval estimates.

Three seeds hide a lot (the paper's GRPO is 70.57 ± 7.83), so beside the usual mean ± CI over seeds the tables
report the statistics of Agarwal et al., "Deep RL at the Edge of the Statistical Precipice" (NeurIPS 2021), via
their library ``rliable``: interquartile mean (IQM) and mean with stratified-bootstrap 95% CIs over
seeds × eval tasks, the probability of improvement over a baseline, and performance profiles.

A score matrix has shape (n_seeds, n_tasks): entry [i, j] is the mean score of seed i's final evaluation on
eval task j. The bootstrap resamples seeds within each task (rliable's stratified bootstrap).
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Mapping

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


def _aggregates(scores: np.ndarray) -> np.ndarray:
    return np.array([iqm(scores), float(np.mean(scores))])


AGGREGATE_NAMES = ("IQM", "Mean")


def _random_state(seed: int) -> np.random.RandomState:
    return np.random.RandomState(seed)


@contextmanager
def _seeded(seed: int):
    """rliable 1.2's stratified bootstrap draws its indices from numpy's *global* generator (its
    ``random_state`` argument only reaches arch), so seed that generator for the call and restore it after;
    also silence arch 7.2's deprecation warning about the ``random_state`` rliable passes."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="random_state is deprecated", category=FutureWarning)
            yield
    finally:
        np.random.set_state(saved)


def interval_estimates(
    score_dict: Mapping[str, np.ndarray], reps: int = 2000, seed: int = 0
) -> dict[str, dict[str, tuple[float, float, float]]]:
    """{method: {"IQM"|"Mean": (point, ci_low, ci_high)}} with rliable's stratified bootstrap (95%)."""
    from rliable import library as rly

    with _seeded(seed):
        points, intervals = rly.get_interval_estimates(
            dict(score_dict), _aggregates, reps=reps, random_state=_random_state(seed)
        )
    return {
        method: {name: (float(points[method][i]), *map(float, intervals[method][:, i])) for i, name in enumerate(AGGREGATE_NAMES)}
        for method in points
    }


def improvement_over(
    score_dict: Mapping[str, np.ndarray], baseline: str, reps: int = 2000, seed: int = 0
) -> dict[str, tuple[float, float, float]]:
    """{method: (P(method > baseline), ci_low, ci_high)} for every other method, with rliable's independent
    stratified bootstrap (seeds of the two methods resampled separately). Empty if the baseline is absent."""
    from rliable import library as rly

    if baseline not in score_dict:
        return {}
    pairs = {m: (scores, score_dict[baseline]) for m, scores in score_dict.items() if m != baseline}
    if not pairs:
        return {}
    with _seeded(seed):
        points, intervals = rly.get_interval_estimates(
            pairs, probability_of_improvement, reps=reps, random_state=_random_state(seed)
        )
    return {m: (float(points[m]), *map(float, np.ravel(intervals[m]))) for m in points}


def score_distribution(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Fraction of all (seed, task) scores above each τ: ``rliable.library.score_distributions`` in one
    broadcast instead of one call per τ."""
    return (np.asarray(scores, dtype=float).reshape(-1, 1) > np.asarray(taus, dtype=float)[None, :]).mean(axis=0)


def performance_profiles(
    score_dict: Mapping[str, np.ndarray], taus: np.ndarray, reps: int = 2000, seed: int = 0
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """{method: (taus, fraction of (seed, task) scores > τ, CI (2, len(taus)))}: rliable's score-distribution
    performance profile (``create_performance_profile``), with a fixed random state, which it does not take."""
    from rliable import library as rly

    taus = np.asarray(taus, dtype=float)
    with _seeded(seed):
        points, intervals = rly.get_interval_estimates(
            dict(score_dict), lambda s: score_distribution(s, taus), reps=reps, random_state=_random_state(seed)
        )
    return {m: (taus, np.asarray(points[m]), np.asarray(intervals[m])) for m in points}
