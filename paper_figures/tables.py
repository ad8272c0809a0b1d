"""The paper's tables, each as (tidy numbers, formatted display). Runs the grid expects but that have not finished
show "—" (no seed at all) or the count of seeds used, e.g. "(2/3)".
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from paper_figures import render, stats
from paper_figures.load import Results

REFERENCE_CSV = Path(__file__).parent / "reference" / "sharpo_2610.00838.csv"


@dataclass
class Context:
    """What every table needs besides the runs."""

    expected: pd.DataFrame  # benchmark, method, seed of every run the grid asks for (may be empty)
    reference: pd.DataFrame  # the paper's numbers: benchmark, method, success_pct, plus_minus
    order: list[str] | None = None  # method order of the grid
    baseline: str = "grpo"
    reps: int = 2000
    seed: int = 0

    def n_expected(self, benchmark: str, method: str) -> int | None:
        rows = self.expected[(self.expected["benchmark"] == benchmark) & (self.expected["method"] == method)]
        return len(rows) or None


def load_reference(path: Path = REFERENCE_CSV) -> pd.DataFrame:
    return pd.read_csv(path)


def benchmarks_of(results: Results, ctx: Context) -> list[str]:
    return sorted(set(results.runs["benchmark"]) | set(ctx.expected["benchmark"]))


def methods_of(results: Results, ctx: Context, benchmarks: list[str], with_reference: bool = False) -> list[str]:
    labels = set(results.runs["method"]) | set(ctx.expected["method"])
    if with_reference:
        labels |= set(ctx.reference.loc[ctx.reference["benchmark"].isin(benchmarks), "method"])
    return render.order_methods(labels, ctx.order and [*ctx.order, *sorted(labels - set(ctx.order))])


def _summary(values: pd.Series) -> tuple[float, float, int]:
    return stats.mean_ci(values.to_numpy())


def _cell(values: pd.Series, expected: int | None) -> tuple[str, tuple[float, float, int]]:
    mean, half, n = _summary(values)
    return render.fmt_seeds(render.fmt_pm(mean, half), n, expected), (mean, half, n)


def main_table(results: Results, ctx: Context) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Success % (mean ± 95% t-CI over seeds of the final evaluation), ours beside the paper's, per benchmark."""
    benchmarks = benchmarks_of(results, ctx)
    methods = methods_of(results, ctx, benchmarks, with_reference=True)
    tidy, display = [], []
    for method in methods:
        line = {"Method": render.method_name(method)}
        for bench in benchmarks:
            runs = results.runs[(results.runs["benchmark"] == bench) & (results.runs["method"] == method)]
            cell, (mean, half, n) = _cell(runs["success"], ctx.n_expected(bench, method))
            ref = ctx.reference[(ctx.reference["benchmark"] == bench) & (ctx.reference["method"] == method)]
            paper = ref.iloc[0] if len(ref) else None
            paper_mean = np.nan if paper is None else float(paper["success_pct"])
            paper_pm = np.nan if paper is None else float(paper["plus_minus"])
            tidy.append({"benchmark": bench, "method": method, "n_seeds": n,
                         "n_expected": ctx.n_expected(bench, method) or 0, "success_pct": mean * 100,
                         "ci95_pct": half * 100, "paper_success_pct": paper_mean, "paper_plus_minus": paper_pm})
            name = render.benchmark_name(bench)
            line[f"{name} (ours)"] = cell
            line[f"{name} (paper)"] = render.fmt_pm(paper_mean, paper_pm, digits=2, scale=1.0)
        display.append(line)
    return pd.DataFrame(tidy), pd.DataFrame(display)


def breakdown_table(results: Results, ctx: Context, benchmark: str, column: str, value: str = "success"):
    """Final-eval ``value`` per category of ``column`` (e.g. ALFWorld task type), mean ± CI over seeds."""
    episodes = results.final_episodes[results.final_episodes["benchmark"] == benchmark]
    per_run = episodes.groupby(["method", "seed", column])[value].mean().reset_index()
    per_run_all = episodes.groupby(["method", "seed"])[value].mean().reset_index()
    categories = render.order_categories(per_run[column].astype(str))
    tidy, display = [], []
    for method in methods_of(results, ctx, [benchmark]):
        line = {"Method": render.method_name(method)}
        expected = ctx.n_expected(benchmark, method)
        for category in [*categories, "all"]:
            rows = per_run_all if category == "all" else per_run[per_run[column].astype(str) == category]
            cell, (mean, half, n) = _cell(rows.loc[rows["method"] == method, value], expected)
            line[render.category_name(category)] = cell
            tidy.append({"benchmark": benchmark, "method": method, column: category, "n_seeds": n,
                         f"{value}_pct": mean * 100, "ci95_pct": half * 100})
        display.append(line)
    return pd.DataFrame(tidy), pd.DataFrame(display)


def score_success_table(results: Results, ctx: Context, benchmark: str):
    """Mean score (0–100) and success % of the final evaluation (WebShop's two reported numbers)."""
    tidy, display = [], []
    for method in methods_of(results, ctx, [benchmark]):
        runs = results.runs[(results.runs["benchmark"] == benchmark) & (results.runs["method"] == method)]
        expected = ctx.n_expected(benchmark, method)
        line, row = {"Method": render.method_name(method)}, {"benchmark": benchmark, "method": method}
        for value, title in (("score", "Score"), ("success", "Success %")):
            line[title], (mean, half, n) = _cell(runs[value], expected)
            row.update({"n_seeds": n, f"{value}_pct": mean * 100, f"{value}_ci95_pct": half * 100})
        tidy.append(row)
        display.append(line)
    return pd.DataFrame(tidy), pd.DataFrame(display)


def _default_option(method: str, key: str):
    try:
        from harness.core import registry

        return getattr(registry.get(method).Config(), key)
    except Exception:  # the registry may not import (no methods yet); the table then says "default"
        return "default"


def sweep_table(results: Results, ctx: Context, key: str = "lam"):
    """Success % per value of option ``key`` for each method run with several values (the λ-sensitivity
    table); None when no method was. The plain label's value is the method's default."""
    labels = methods_of(results, ctx, benchmarks_of(results, ctx))
    values = {m: dict(render.split_label(m)).get(key) for m in labels}
    groups: dict[str, list[str]] = {}
    for method in labels:
        if method == render.base_method(method) or values[method] is not None:
            groups.setdefault(render.base_method(method), []).append(method)
    swept = {base: members for base, members in groups.items() if len(members) >= 2}
    if not swept:
        return None
    tidy, display = [], []
    for base, members in swept.items():
        for method in members:
            value = values[method] if method != base else _default_option(base, key)
            line = {"Method": render.display_name(base), render.OPTION_SYMBOLS.get(key, key): str(value),
                    "Label": method}
            for bench in benchmarks_of(results, ctx):
                runs = results.runs[(results.runs["benchmark"] == bench) & (results.runs["method"] == method)]
                line[render.benchmark_name(bench)], (mean, half, n) = _cell(runs["success"], ctx.n_expected(bench, method))
                tidy.append({"benchmark": bench, "method": method, key: value, "n_seeds": n,
                             "success_pct": mean * 100, "ci95_pct": half * 100})
            display.append(line)
    return pd.DataFrame(tidy), pd.DataFrame(display)


def score_matrices(results: Results, benchmark: str, metric: str = "success") -> dict[str, np.ndarray]:
    """{method: (n_seeds, n_tasks)} final-eval scores, tasks aligned across methods (their intersection)."""
    episodes = results.final_episodes[results.final_episodes["benchmark"] == benchmark]
    if episodes.empty:
        return {}
    per_task = episodes.groupby(["method", "seed", "task_id"])[metric].mean().unstack("task_id")
    complete = per_task.dropna(axis=1)
    if complete.shape[1] < per_task.shape[1]:
        warnings.warn(f"{benchmark}: {per_task.shape[1] - complete.shape[1]} eval task(s) are missing from some "
                      "runs and are left out of the rliable statistics", stacklevel=2)
    return {m: complete.loc[m].to_numpy(dtype=float) for m in complete.index.get_level_values("method").unique()}


def rliable_table(results: Results, ctx: Context, benchmark: str, metric: str = "success"):
    """IQM and mean with stratified-bootstrap 95% CIs over seeds × eval tasks, and P(method > baseline)."""
    scores = score_matrices(results, benchmark, metric)
    if not scores:
        return None
    estimates = stats.interval_estimates(scores, reps=ctx.reps, seed=ctx.seed)
    improvement = stats.improvement_over(scores, ctx.baseline, reps=ctx.reps, seed=ctx.seed)
    tidy, display = [], []
    base_name = render.method_name(ctx.baseline)
    for method in methods_of(results, ctx, [benchmark]):
        line = {"Method": render.method_name(method), "Seeds × tasks": render.MISSING}
        row = {"benchmark": benchmark, "metric": metric, "method": method}
        if method in scores:
            line["Seeds × tasks"] = "{} × {}".format(*scores[method].shape)
        for name in stats.AGGREGATE_NAMES:
            point, low, high = estimates.get(method, {}).get(name, (np.nan,) * 3)
            line[name] = render.fmt_interval(point, low, high)
            row.update({name.lower(): point, f"{name.lower()}_low": low, f"{name.lower()}_high": high})
        point, low, high = improvement.get(method, (np.nan,) * 3)
        line[f"P(> {base_name})"] = render.fmt_interval(point, low, high, digits=2, scale=1.0)
        row.update({"prob_improvement": point, "prob_improvement_low": low, "prob_improvement_high": high})
        tidy.append(row)
        display.append(line)
    return pd.DataFrame(tidy), pd.DataFrame(display)


def cost_table(results: Results, ctx: Context):
    """Wall time per run and where the time of a training step goes (generation, env, teacher, update)."""
    time_columns = [c for c in results.metrics.columns if c.startswith("time/")]
    step_means = results.metrics.groupby(["benchmark", "method", "seed"])[time_columns].mean() if time_columns else None
    tidy, display = [], []
    for bench in benchmarks_of(results, ctx):
        for method in methods_of(results, ctx, [bench]):
            runs = results.runs[(results.runs["benchmark"] == bench) & (results.runs["method"] == method)]
            row = {"benchmark": bench, "method": method, "n_runs": len(runs),
                   "wall_time_min": runs["wall_time_s"].astype(float).mean() / 60, "steps": runs["steps"].max()}
            line = {"Benchmark": render.benchmark_name(bench), "Method": render.method_name(method),
                    "Runs": len(runs), "Wall time / run (min)": render.fmt_pm(row["wall_time_min"], None, 1, 1.0)}
            if step_means is not None and (bench, method) in step_means.droplevel("seed").index:
                means = step_means.loc[(bench, method)].mean()
                for column in time_columns:
                    row[f"{column}_mean_s"] = means[column]
                    line[f"{column.removeprefix('time/')} s/step"] = render.fmt_pm(means[column], None, 2, 1.0)
            tidy.append(row)
            display.append(line)
    return pd.DataFrame(tidy), pd.DataFrame(display).fillna(render.MISSING)
