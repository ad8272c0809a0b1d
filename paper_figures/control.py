"""Differences paired by seed: each arm's final success minus a reference arm's (the frozen run, or GRPO).

The runs of one seed share its warm start, its eval tasks and its sampling seeds, so the per-seed difference is the
unit: it takes out what the seeds have in common. Against the frozen run (``grid.frozen_control``: the warm start
evaluated, lr 0) it isolates what RL changed; against GRPO it is the sharper test of a credit method, since every
method's first step samples the very rollouts GRPO's does.

A table of m comparisons (every arm with an interval in a benchmark's column, methods and controls alike, since a
claim can be read off any row) gives each interval at 1 − 0.05/m (Bonferroni, ``stats.bonferroni_confidence``), so
that all of them hold together with 95%: the gain's Student-t interval over the per-seed differences, and P(arm >
reference), the share of seeds on which the arm's run beats the same seed's reference run, with a bootstrap that
resamples seed indices once for both arms. "CI > 0" reads the adjusted interval (equivalently, the Bonferroni
p-value of the paired t-test below 0.05). Control arms (``render.role``) are listed below the methods, never ranked.
"""
from __future__ import annotations

import pandas as pd

from harness.grid.runs import FROZEN
from paper_figures import bootstrap, premise, render, stats
from paper_figures.load import Results


def paired_success(runs: pd.DataFrame, benchmark: str, arm: str, reference: str) -> pd.DataFrame:
    """(seed → arm, reference) final success of the seeds both arms finished on ``benchmark``."""
    of_bench = runs[runs["benchmark"] == benchmark]
    ours, base = (_by_seed(of_bench, name, benchmark) for name in (arm, reference))
    return pd.DataFrame({"arm": ours, "reference": base}).dropna().sort_index()


def _by_seed(runs: pd.DataFrame, arm: str, benchmark: str) -> pd.Series:
    """seed → final success of ``arm``; a seed listed twice (two runs tables concatenated) is an error, since the
    pairing could not tell which of its runs to use."""
    of_arm = runs[runs["method"] == arm]
    twice = sorted(of_arm.loc[of_arm["seed"].duplicated(), "seed"].unique().tolist())
    if twice:
        raise ValueError(f"{benchmark}/{arm}: seed(s) {twice} appear in more than one run; each (benchmark, method, "
                         f"seed) must be one run: keep one runs table per grid, or drop the repeated rows")
    return of_arm.set_index("seed")["success"]


def compared_arms(runs: pd.DataFrame, benchmark: str, reference: str, arms: list[str]) -> list[str]:
    """The arms of ``arms`` with ≥ 2 seeds paired with ``reference`` on ``benchmark``: the comparisons that give an
    interval, the m of the Bonferroni adjustment."""
    return [a for a in arms if a != reference and len(paired_success(runs, benchmark, a, reference)) >= 2]


def paired_comparison(pairs: pd.DataFrame, m: int, reps: int, rng) -> dict:
    """The paired t statistics of arm − reference (``stats.paired_t`` at m comparisons) and P(arm > reference)
    with its paired bootstrap interval at the same adjusted level."""
    diffs = (pairs["arm"] - pairs["reference"]).to_numpy()
    result = stats.paired_t(diffs, m)
    if len(diffs):
        x, y = pairs[["arm"]].to_numpy(), pairs[["reference"]].to_numpy()
        result["prob"], result["prob_low"], result["prob_high"] = bootstrap.paired_probability(
            x, y, reps, rng, result["confidence"])
        _, result["boot_low"], result["boot_high"] = bootstrap.paired_mean(diffs, reps, rng, result["confidence"])
    else:
        result.update(prob=float("nan"), prob_low=float("nan"), prob_high=float("nan"), boot_low=float("nan"),
                      boot_high=float("nan"))
    return result


def _tidy(bench: str, method: str, r: dict) -> dict:
    """The tidy row: adjusted numbers, and (``ci95_*``, ``learns``) the unadjusted 95% interval of the comparison
    alone, which a pilot's single pre-stated comparison (oracle − GRPO, docs/profiles.md) reads."""
    return {"benchmark": bench, "method": method, "role": render.role(method) or "method", "n_seeds": r["n"],
            "m": r["m"], "confidence": r["confidence"], "gain_pct": r["mean"] * 100, "sd_pct": r["sd"] * 100,
            "ci_half_pct": r["half"] * 100, "ci_low_pct": r["low"] * 100, "ci_high_pct": r["high"] * 100,
            "boot_low_pct": r["boot_low"] * 100, "boot_high_pct": r["boot_high"] * 100, "p_bonferroni": r["p_adj"],
            "excludes_zero": bool(r["low"] > 0 or r["high"] < 0), "prob_improvement": r["prob"],
            "prob_low": r["prob_low"], "prob_high": r["prob_high"], "ci95_pct": r["half95"] * 100,
            "ci95_low_pct": (r["mean"] - r["half95"]) * 100, "learns": bool(r["mean"] - r["half95"] > 0)}


def _cells(name: str, against: str, r: dict) -> dict:
    verdict = render.MISSING if r["n"] < 2 else ("yes" if r["low"] > 0 else "below 0" if r["high"] < 0 else "no")
    return {f"{name}: gain over {against} (points)": render.fmt_pm(r["mean"], r["half"]),
            f"{name}: P(> {against})": render.fmt_interval(r["prob"], r["prob_low"], r["prob_high"], 2, 1.0),
            f"{name}: seeds": r["n"], f"{name}: CI > 0": verdict}


def caption_note(tidy: pd.DataFrame) -> str:
    """Per benchmark: m, how many of them are controls, and the level each interval is given at."""
    notes = []
    for bench, rows in ([] if tidy.empty else tidy[tidy["n_seeds"] >= 2].groupby("benchmark", sort=False)):
        controls = int((rows["role"] != "method").sum())
        notes.append(f"{render.benchmark_name(bench)}: m = {len(rows)} ({len(rows) - controls} methods, {controls} "
                     f"controls), each interval at {rows['confidence'].iloc[0]:.2%}")
    return "; ".join(notes) or "no arm has two paired seeds: no interval"


def control_table(results: Results, ctx, control: str = FROZEN):
    """(tidy, display) or None when no run of ``control`` finished; methods first, then the control arms (marked
    in the name and the Role column). ``caption_note(tidy)`` says the m and the level of each benchmark."""
    from paper_figures.tables import benchmarks_of, methods_of

    runs = results.runs
    if runs.empty or not (runs["method"] == control).any():
        return None
    has_control = runs["method"] == control
    benchmarks = [b for b in benchmarks_of(results, ctx) if (has_control & (runs["benchmark"] == b)).any()]
    methods = render.methods_then_controls(m for m in methods_of(results, ctx, benchmarks) if m != control)
    against = "frozen" if control == FROZEN else render.method_name(control)
    m_of = {b: len(compared_arms(runs, b, control, methods)) for b in benchmarks}
    tidy, display = [], []
    for method in methods:
        line = {"Method": render.arm_name(method)}
        for bench in benchmarks:
            rng = bootstrap.rng_for(ctx.seed, f"{method}>{control}/{bench}")
            r = paired_comparison(paired_success(runs, bench, method, control), m_of[bench], ctx.reps, rng)
            tidy.append(_tidy(bench, method, r))
            line.update(_cells(render.benchmark_name(bench), against, r))
        line["Role"] = render.role(method) or "method"
        display.append(line)
    return pd.DataFrame(tidy), premise.add_notes(pd.DataFrame(display), methods, benchmarks, ctx.notes)
