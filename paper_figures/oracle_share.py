"""The scale the positive controls set: what share of the oracle's gain over GRPO each method recovers, and how many
seeds it takes to resolve a gain of half the oracle's.

A gain of +3 points means little until one knows what credit that knows the answer gains on the same task: the
oracle arms (methods/oracle.py, ``control = "positive"``) read the benchmark's ground-truth turn labels, so
(method − GRPO) / (oracle − GRPO) puts a method on the scale "0 = GRPO, 1 = the oracle". Both differences are paired
by seed; the point is the ratio of the mean differences, not the mean of per-seed ratios, which a seed with a tiny
oracle gain would blow up. The share is defined only where the oracle's own gain is distinguishable from 0.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from paper_figures import bootstrap, control, render, stats
from paper_figures.load import Results

ORACLES = ("oracle_fatal", "oracle_decisive")  # the positive controls, in the order of the table's columns
CAPTION = ("Share of the oracle's gain over GRPO each method recovers, (method − GRPO) / (oracle − GRPO), paired by "
           "seed over the seeds all three arms ran (1 = as good as the oracle, 0 = GRPO, below 0 = worse than GRPO). "
           "Point: the ratio of the mean paired differences (a ratio of means, not a mean of per-seed ratios, which "
           "a seed with a tiny oracle gain would blow up); interval: a bootstrap that resamples seed indices once "
           "for the three arms and takes the ratio of the resampled means, widened for the seed count and "
           "Bonferroni-adjusted for the m shares of the benchmark (each at 1 − 0.05/m). A share is given only where "
           "the oracle's own gain interval in the gain table excludes 0; otherwise it is undefined (—)")
POWER_CAPTION = ("Seeds needed to resolve half of the positive control's paired gain over GRPO at the grid's paired "
                 "SD (of the oracle − GRPO differences), with 80% power, by a two-sided paired t-test at α = 0.05/m "
                 "(Bonferroni over the m comparisons of the gain table): the fewest seeds with noncentral-t power ≥ "
                 "0.8, and the normal approximation n = ((z_{1−α/(2m)} + z_{0.8}) · SD / gain)² beside it "
                 "(docs/results.md, 'How many seeds')")


def _arms(results: Results, ctx, baseline: str) -> tuple[list[str], list[str], list[str]]:
    """(benchmarks with a baseline run, every arm but the baseline as the gain table lists them, oracles present)."""
    from paper_figures.tables import benchmarks_of, methods_of

    runs = results.runs
    benchmarks = [b for b in benchmarks_of(results, ctx)
                  if ((runs["benchmark"] == b) & (runs["method"] == baseline)).any()]
    arms = [m for m in methods_of(results, ctx, benchmarks) if m != baseline]
    oracles = [o for o in ORACLES if (runs["method"] == o).any()]
    return benchmarks, arms, oracles


def oracle_gain(runs: pd.DataFrame, bench: str, oracle: str, baseline: str, arms: list[str]) -> dict:
    """The oracle's paired gain over the baseline, at the gain table's adjustment (its m over ``arms``)."""
    m = len(control.compared_arms(runs, bench, baseline, arms))
    pairs = control.paired_success(runs, bench, oracle, baseline)
    return stats.paired_t((pairs["arm"] - pairs["reference"]).to_numpy(), m)


def triples(runs: pd.DataFrame, bench: str, method: str, oracle: str, baseline: str) -> pd.DataFrame:
    """(seed → method, oracle, baseline) final success over the seeds all three arms finished."""
    of_bench = runs[runs["benchmark"] == bench]
    columns = {k: of_bench[of_bench["method"] == label].set_index("seed")["success"]
               for k, label in (("method", method), ("oracle", oracle), ("baseline", baseline))}
    return pd.DataFrame(columns).dropna().sort_index()


def share(seeds: pd.DataFrame, reps: int, rng, confidence: float) -> tuple[float, float, float]:
    """(share, low, high): mean(method − base) / mean(oracle − base), and its paired bootstrap interval (one draw of
    seed indices for all three arms; a resample whose oracle gain is exactly 0 is left out)."""
    ours = (seeds["method"] - seeds["baseline"]).to_numpy()
    oracle = (seeds["oracle"] - seeds["baseline"]).to_numpy()
    if len(ours) == 0 or oracle.mean() == 0:
        return float("nan"), float("nan"), float("nan")
    pick = bootstrap.paired_indices(len(ours), reps, rng)
    denominator = oracle[pick].mean(axis=1)
    boot = ours[pick].mean(axis=1) / np.where(denominator == 0, np.nan, denominator)
    return bootstrap.widen(float(ours.mean() / oracle.mean()), boot, len(ours), (-np.inf, np.inf), confidence)


def short_name(oracle: str) -> str:
    """``Oracle: fatal turn``: the oracle's display name without "(positive control)", for column headers."""
    return render.method_name(oracle).replace(" (positive control)", "")


def _note(bench: str, oracle: str, gain: dict, m: int) -> str:
    name, base = render.benchmark_name(bench), short_name(oracle)
    cell = render.fmt_pm(gain["mean"], gain["half"])
    if gain["n"] < 2 or not gain["low"] > 0:
        return (f"{name}: {base}'s gain over GRPO, {cell} points ({gain['n']} seeds), is not distinguishable from 0 "
                f"at the gain table's {gain['confidence']:.2%}: its share is undefined (—)")
    return f"{name}: {base}'s gain {cell} points; m = {m} shares, each at {stats.bonferroni_confidence(m):.2%}"


def share_table(results: Results, ctx):
    """(tidy, display, caption note) per method (controls left out), one column per benchmark × oracle present; None
    when no oracle or no baseline run finished."""
    baseline = ctx.baseline
    benchmarks, arms, oracles = _arms(results, ctx, baseline)
    methods = [m for m in arms if not render.role(m)]
    if not oracles or not benchmarks or not methods:
        return None
    runs, tidy, notes = results.runs, [], []
    display = {m: {"Method": render.arm_name(m)} for m in methods}
    for bench in benchmarks:
        for oracle in oracles:
            gain = oracle_gain(runs, bench, oracle, baseline, arms)
            defined = gain["n"] >= 2 and gain["low"] > 0
            seeds = {m: triples(runs, bench, m, oracle, baseline) for m in methods}
            m_shares = sum(len(s) >= 2 for s in seeds.values()) if defined else 0
            confidence = stats.bonferroni_confidence(m_shares)
            notes.append(_note(bench, oracle, gain, m_shares))
            column = f"{render.benchmark_name(bench)}: share of {short_name(oracle)}"
            for method in methods:
                rng = bootstrap.rng_for(ctx.seed, f"{method}/{oracle}>{baseline}/{bench}")
                point, low, high = share(seeds[method], ctx.reps, rng, confidence) if defined else (np.nan,) * 3
                tidy.append({"benchmark": bench, "method": method, "oracle": oracle, "n_seeds": len(seeds[method]),
                             "share": point, "share_low": low, "share_high": high, "m": m_shares,
                             "confidence": confidence, "oracle_gain_pct": gain["mean"] * 100,
                             "oracle_ci_half_pct": gain["half"] * 100, "defined": defined})
                display[method][column] = render.fmt_interval(point, low, high, digits=2, scale=1.0)
                display[method][f"{render.benchmark_name(bench)}: seeds ({short_name(oracle)})"] = len(seeds[method])
    return pd.DataFrame(tidy), pd.DataFrame(list(display.values())), "; ".join(notes)


def power_table(results: Results, ctx):
    """(tidy, display) per benchmark × oracle with ≥ 2 seeds paired with the baseline: the seeds needed to resolve
    half the oracle's paired gain at its paired SD (``stats.seeds_needed``); None without such an oracle."""
    benchmarks, arms, oracles = _arms(results, ctx, ctx.baseline)
    tidy, display = [], []
    for bench in benchmarks:
        for oracle in oracles:
            gain = oracle_gain(results.runs, bench, oracle, ctx.baseline, arms)
            if gain["n"] < 2:
                continue
            # half of a gain the grid cannot tell from 0 is no stated gain: no seed count for it
            target, sd, resolvable = gain["mean"] / 2, gain["sd"], gain["low"] > 0
            needed = stats.seeds_needed(target, sd, gain["m"]) if resolvable else np.nan
            normal = stats.seeds_needed_normal(target, sd, gain["m"]) if resolvable and sd > 0 else np.nan
            tidy.append({"benchmark": bench, "oracle": oracle, "n_seeds": gain["n"], "m": gain["m"],
                         "oracle_gain_pct": gain["mean"] * 100, "sd_pct": sd * 100, "target_pct": target * 100,
                         "distinguishable": bool(gain["low"] > 0), "seeds_needed": needed,
                         "seeds_needed_normal": normal})
            display.append({"Benchmark": render.benchmark_name(bench), "Positive control": render.arm_name(oracle),
                            "gain over GRPO (points)": render.fmt_pm(gain["mean"], gain["half"]),
                            "paired SD (points)": render.fmt_pm(sd), "target gain (points)": render.fmt_pm(target),
                            "gain ≠ 0": "yes" if gain["low"] > 0 else "no", "m": gain["m"],
                            "seeds needed (80% power)": render.MISSING if render.is_missing(needed) else needed,
                            "normal approx.": render.MISSING if render.is_missing(normal) else normal,
                            "seeds in the grid": gain["n"]})
    return (pd.DataFrame(tidy), pd.DataFrame(display)) if tidy else None
