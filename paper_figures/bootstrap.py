"""Bootstrap intervals whose unit of replication is the training seed.

Every eval episode of a seed shares that seed's one training run, so episodes are not independent replicates:
resampling them as rliable resamples independent runs averages the seed-to-seed spread away and gives intervals
several times too narrow. Here a bootstrap draw resamples the seeds (with replacement), then, hierarchically, the
episodes within each drawn seed and task type; rliable's tasks are the benchmark's task *types* (ALFWorld's six;
one for Gates), never its episodes. Resampling both levels counts the episode noise twice (it is already inside the
seed means), so the interval errs on the wide side (Saravanan et al., "Application of the hierarchical bootstrap
to multi-level data in neuroscience", 2020).

With five seeds a percentile bootstrap is itself too narrow: it uses the n-denominator variance and normal
quantiles where a t interval uses n − 1 and t_{n−1}. The percentile interval is therefore widened about the
point estimate by c = √(n/(n−1)) · t_{0.975, n−1} / z_{0.975} (Hesterberg's expanded percentile interval, "What
teachers should know about the bootstrap", The American Statistician 2015): c = 1.58 for 5 seeds, 2.69 for 3. For
a mean this makes the bootstrap interval about as wide as the Student-t interval over seed means.

A comparison of two arms is paired by seed (``improvement_over``, ``paired_probability``, ``paired_mean``): the runs
of a seed share the warm start, the eval tasks and the sampling seeds, so one draw of seed indices is applied to
both arms and the per-seed difference (or win) is the unit; the episodes are not redrawn there, since the seed's
difference already holds their noise. A table of m comparisons passes ``confidence`` = 1 − 0.05/m (Bonferroni).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

CONFIDENCE = 0.95


@dataclass(frozen=True)
class SeedScores:
    """One method's final-eval scores: ``cells[i][k]`` holds the episode values of seed ``seeds[i]`` on task type
    ``types[k]``."""

    seeds: tuple
    types: tuple
    cells: tuple[tuple[np.ndarray, ...], ...]

    @property
    def n_seeds(self) -> int:
        return len(self.seeds)

    def matrix(self) -> np.ndarray:
        """(n_seeds, n_types) seed means per task type: rliable's score matrix with task types as tasks."""
        return np.array([[cell.mean() for cell in row] for row in self.cells], dtype=float)


def seed_scores(episodes: pd.DataFrame, metric: str = "success", type_column: str = "task_type"
                ) -> dict[str, SeedScores]:
    """{method: SeedScores} from final-eval episodes (columns method, seed, ``type_column``, ``metric``); only the
    task types every seed of every method evaluated are kept, so the columns mean the same for all methods."""
    if episodes.empty:
        return {}
    frame = episodes.assign(**{type_column: episodes[type_column].astype(str)})
    counts = frame.groupby(["method", "seed", type_column]).size().unstack(type_column)
    types = tuple(sorted(counts.columns[counts.notna().all(axis=0)]))
    out = {}
    for method, of_method in frame.groupby("method", sort=False):
        groups = {key: group[metric].to_numpy(dtype=float) for key, group in of_method.groupby(["seed", type_column])}
        seeds = tuple(sorted(of_method["seed"].unique()))
        out[method] = SeedScores(seeds, types, tuple(tuple(groups[(s, k)] for k in types) for s in seeds))
    return out


def expansion(n: int, confidence: float = CONFIDENCE) -> float:
    """c = √(n/(n−1)) · t_{(1+conf)/2, n−1} / z_{(1+conf)/2}: the small-sample widening of a percentile interval."""
    if n < 2:
        return float("nan")
    q = 0.5 + confidence / 2
    return float(np.sqrt(n / (n - 1)) * scipy_stats.t.ppf(q, n - 1) / scipy_stats.norm.ppf(q))


def rng_for(seed: int, name: str) -> np.random.Generator:
    """A generator per (seed, name): one method's interval does not move when another method is added."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def resample(scores: SeedScores, reps: int, rng: np.random.Generator, episodes: bool = True) -> np.ndarray:
    """(reps, n_seeds, n_types) resampled score matrices: seeds drawn with replacement, then (``episodes``) each
    drawn seed's episodes redrawn with replacement within every task type."""
    n = scores.n_seeds
    pick = rng.integers(0, n, size=(reps, n))
    out = np.empty((reps, n, len(scores.types)))
    for i in range(n):
        chosen = pick == i
        count = int(chosen.sum())
        for k, cell in enumerate(scores.cells[i]):
            if not episodes or count == 0:
                out[chosen, k] = cell.mean()
                continue
            out[chosen, k] = cell[rng.integers(0, cell.size, size=(count, cell.size))].mean(axis=1)
    return out


def widen(point: float, boot: np.ndarray, n: int, limits: tuple[float, float], confidence: float = CONFIDENCE
          ) -> tuple[float, float, float]:
    """(point, low, high): the percentile interval of ``boot`` at ``confidence`` widened by ``expansion(n,
    confidence)`` about ``point`` and clipped to the statistic's range; no interval (NaN) from one seed. NaN
    resamples (a ratio whose denominator came out 0) are left out."""
    c = expansion(n, confidence)
    if not np.isfinite(c) or not np.isfinite(boot).any():
        return float(point), float("nan"), float("nan")
    q_low, q_high = np.nanpercentile(boot, [50 - 50 * confidence, 50 + 50 * confidence])
    low = np.clip(point - c * (point - q_low), *limits)
    high = np.clip(point + c * (q_high - point), *limits)
    return float(point), float(min(low, point)), float(max(high, point))


def iqm_batched(matrices: np.ndarray) -> np.ndarray:
    """Interquartile mean of every (seeds × types) matrix in a (reps, seeds, types) stack: rliable's IQM."""
    flat = np.sort(matrices.reshape(matrices.shape[0], -1), axis=1)
    cut = int(0.25 * flat.shape[1])
    return flat[:, cut: flat.shape[1] - cut].mean(axis=1)


def mean_batched(matrices: np.ndarray) -> np.ndarray:
    return matrices.reshape(matrices.shape[0], -1).mean(axis=1)


AGGREGATES: dict[str, Callable[[np.ndarray], np.ndarray]] = {"IQM": iqm_batched, "Mean": mean_batched}


def _limits(scores: SeedScores) -> tuple[float, float]:
    values = np.concatenate([cell for row in scores.cells for cell in row])
    return float(values.min()), float(values.max())


def interval_estimates(score_dict: Mapping[str, SeedScores], reps: int = 2000, seed: int = 0
                       ) -> dict[str, dict[str, tuple[float, float, float]]]:
    """{method: {"IQM"|"Mean": (point, low, high)}}: hierarchical bootstrap over seeds, then episodes."""
    out = {}
    for method, scores in score_dict.items():
        boot = resample(scores, reps, rng_for(seed, method))
        matrix = scores.matrix()[None]
        out[method] = {name: widen(float(fn(matrix)[0]), fn(boot), scores.n_seeds, _limits(scores))
                       for name, fn in AGGREGATES.items()}
    return out


def probability_of_improvement_batched(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) + ½ P(X = Y) over all seed pairs, averaged over task types, for (reps, n, types) stacks: rliable's
    (unpaired) probability of improvement with seed means per task type as the scores."""
    xs, ys = x[:, :, None, :], y[:, None, :, :]
    per_type = (xs > ys).mean(axis=(1, 2)) + 0.5 * (xs == ys).mean(axis=(1, 2))
    return per_type.mean(axis=1)


def paired_indices(n: int, reps: int, rng: np.random.Generator) -> np.ndarray:
    """(reps, n) seed indices drawn with replacement, applied to *both* arms of a comparison: the seed's pair of
    runs, or its difference, is the unit that is resampled, so what the two runs of a seed share stays shared."""
    return rng.integers(0, n, size=(reps, n))


def wins(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(n,) per seed: 1[x > y] + ½ 1[x = y] between the two arms' runs of that seed, averaged over the columns
    (task types). x, y: (n_seeds, n_types), rows aligned by seed."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    return ((x > y) + 0.5 * (x == y)).reshape(len(x), -1).mean(axis=1)


def paired_probability(x: np.ndarray, y: np.ndarray, reps: int, rng: np.random.Generator,
                       confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(P(X > Y), low, high), paired by seed: the share of seeds whose run of X beats the same seed's run of Y (ties
    ½, averaged over task types), with a bootstrap that resamples seed indices once for both arms, widened for the
    seed count. Constant wins (every seed better) give P = 1 and a zero-width interval."""
    per_seed = wins(x, y)
    boot = per_seed[paired_indices(per_seed.size, reps, rng)].mean(axis=1)
    return widen(float(per_seed.mean()), boot, per_seed.size, (0.0, 1.0), confidence)


def paired_mean(diffs, reps: int, rng: np.random.Generator, confidence: float = CONFIDENCE
                ) -> tuple[float, float, float]:
    """(mean, low, high) of per-seed differences: bootstrap over seeds (the difference is the unit), widened."""
    diffs = np.asarray(diffs, dtype=float)
    boot = diffs[paired_indices(diffs.size, reps, rng)].mean(axis=1)
    return widen(float(diffs.mean()), boot, diffs.size, (-np.inf, np.inf), confidence)


def common_seeds(a: SeedScores, b: SeedScores) -> tuple[np.ndarray, np.ndarray]:
    """The two arms' (n, types) seed-mean matrices restricted to their common seeds, rows aligned by seed."""
    seeds = sorted(set(a.seeds) & set(b.seeds))
    if not seeds:  # an unfinished grid: no seed ran by both yet (an empty reshape cannot infer its width)
        return np.empty((0, len(a.types))), np.empty((0, len(b.types)))
    rows_a, rows_b = a.matrix(), b.matrix()
    return (rows_a[[a.seeds.index(s) for s in seeds]].reshape(len(seeds), -1),
            rows_b[[b.seeds.index(s) for s in seeds]].reshape(len(seeds), -1))


def improvement_over(score_dict: Mapping[str, SeedScores], baseline: str, reps: int = 2000, seed: int = 0,
                     confidence: float = CONFIDENCE) -> dict[str, tuple[float, float, float]]:
    """{method: (P(method > baseline), low, high)} paired by seed (``paired_probability``) over the seeds both ran;
    empty if the baseline is absent.

    Why paired: every arm of a seed shares the baseline's warm start, eval tasks and sampling seeds. Resampling
    the two arms independently (as before) compared a method's seed with the baseline's *other* seeds, so with 5
    seeds the interval was [0, 1] by construction even for a method better on every seed."""
    if baseline not in score_dict:
        return {}
    base = score_dict[baseline]
    out = {}
    for method, scores in score_dict.items():
        if method == baseline or scores.types != base.types:
            continue
        x, y = common_seeds(scores, base)
        if len(x) == 0:
            continue
        out[method] = paired_probability(x, y, reps, rng_for(seed, f"{method}>{baseline}"), confidence)
    return out


def seed_interval(values, reps: int = 2000, seed: int = 0, name: str = "", limits=(-np.inf, np.inf)
                  ) -> tuple[float, float, float]:
    """(mean, low, high) of one number per seed (a run-level metric): bootstrap over seeds, widened as above."""
    array = np.asarray(values, dtype=float)
    array = array[np.isfinite(array)]
    if array.size == 0:
        return float("nan"), float("nan"), float("nan")
    boot = array[rng_for(seed, name).integers(0, array.size, size=(reps, array.size))].mean(axis=1)
    return widen(float(array.mean()), boot, int(array.size), limits)


def performance_profiles(episodes: pd.DataFrame, metric: str, taus: np.ndarray, reps: int = 2000, seed: int = 0
                         ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """{method: (taus, fraction of episodes with ``metric`` > τ (mean over seeds), band (2, len(taus)))}; the band
    comes from a bootstrap over seeds, widened as above."""
    taus = np.asarray(taus, dtype=float)
    out = {}
    for method, of_method in episodes.groupby("method", sort=False):
        per_seed = np.array([(group[metric].to_numpy(dtype=float)[:, None] > taus[None, :]).mean(axis=0)
                             for _, group in of_method.groupby("seed")])
        boot = per_seed[rng_for(seed, method).integers(0, len(per_seed), size=(reps, len(per_seed)))].mean(axis=1)
        bands = [widen(p, boot[:, j], len(per_seed), (0.0, 1.0)) for j, p in enumerate(per_seed.mean(axis=0))]
        out[method] = (taus, per_seed.mean(axis=0), np.array([[b[1] for b in bands], [b[2] for b in bands]]))
    return out
