"""Differences paired by seed: each method's final success minus a control arm's (the frozen run, or GRPO).

The runs of one seed share its warm start, its eval tasks and its sampling seeds, so the paired difference takes
out what the seeds have in common. Against the frozen run (``grid.frozen_control``: the warm start evaluated, lr 0)
it isolates what RL changed; against GRPO it is the sharper test of a credit method, since every method's first
step samples the very rollouts GRPO's does. The interval is the Student-t 95% interval over seeds of the per-seed
differences; "learns" (against frozen) means its lower end is above 0.
"""
from __future__ import annotations

import pandas as pd

from harness.grid.runs import FROZEN
from paper_figures import premise, render, stats
from paper_figures.load import Results


def control_table(results: Results, ctx, control: str = FROZEN):
    """(tidy, display) or None when no run of ``control`` finished; the column names say which arm it is."""
    from paper_figures.tables import benchmarks_of, methods_of

    runs = results.runs
    if runs.empty or not (runs["method"] == control).any():
        return None
    tidy, display = [], []
    has_control = runs["method"] == control
    benchmarks = [b for b in benchmarks_of(results, ctx) if (has_control & (runs["benchmark"] == b)).any()]
    methods = [m for m in methods_of(results, ctx, benchmarks) if m != control]
    against = "frozen" if control == FROZEN else render.method_name(control)
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
            line[f"{name}: gain over {against} (points)"] = render.fmt_pm(mean, half)
            line[f"{name}: seeds"] = n
            line[f"{name}: 95% CI > 0"] = render.MISSING if n < 2 else ("yes" if low > 0 else "no")
        display.append(line)
    return pd.DataFrame(tidy), premise.add_notes(pd.DataFrame(display), methods, benchmarks, ctx.notes)
