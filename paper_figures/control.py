"""Gain over the frozen control: each method's final success minus the lr-0 run's, paired by seed.

The frozen run of a seed (``grid.frozen_control``) is the warm start evaluated on the same eval tasks with the
same sampling seeds as that seed's method runs, so the paired difference isolates what RL changed. The interval
is the Student-t 95% interval over seeds of the per-seed differences; "learns" means its lower end is above 0.
"""
from __future__ import annotations

import pandas as pd

from paper_figures import premise, render, stats
from paper_figures.grid import FROZEN
from paper_figures.load import Results


def control_table(results: Results, ctx, control: str = FROZEN):
    """(tidy, display) or None when no run of ``control`` finished."""
    from paper_figures.tables import benchmarks_of, methods_of

    runs = results.runs
    if runs.empty or not (runs["method"] == control).any():
        return None
    tidy, display = [], []
    has_control = runs["method"] == control
    benchmarks = [b for b in benchmarks_of(results, ctx) if (has_control & (runs["benchmark"] == b)).any()]
    methods = [m for m in methods_of(results, ctx, benchmarks) if m != control]
    for method in methods:
        line = {"Method": render.method_name(method)}
        for bench in benchmarks:
            of_bench = runs[runs["benchmark"] == bench]
            base = of_bench[of_bench["method"] == control].set_index("seed")["success"]
            ours = of_bench[of_bench["method"] == method].set_index("seed")["success"]
            paired = (ours - base).dropna()
            mean, half, n = stats.mean_ci(paired.to_numpy())
            low = mean - half
            tidy.append({"benchmark": bench, "method": method, "n_seeds": n, "gain_pct": mean * 100,
                         "ci95_pct": half * 100, "ci95_low_pct": low * 100, "learns": bool(low > 0)})
            name = render.benchmark_name(bench)
            line[f"{name}: gain over frozen (points)"] = render.fmt_pm(mean, half)
            line[f"{name}: seeds"] = n
            line[f"{name}: 95% CI > 0"] = render.MISSING if n < 2 else ("yes" if low > 0 else "no")
        display.append(line)
    return pd.DataFrame(tidy), premise.add_notes(pd.DataFrame(display), methods, benchmarks, ctx.notes)
