"""The paper's tables, each as (tidy numbers, formatted display). Runs the grid expects but that have not finished
show "—" (no seed at all) or the count of seeds used, e.g. "(2/3)".
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from paper_figures import bootstrap, premise, render, stats
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
    notes: dict = field(default_factory=dict)  # (benchmark, method) → premise flags (paper_figures.premise.notes)

    def n_expected(self, benchmark: str, method: str) -> int | None:
        rows = self.expected[(self.expected["benchmark"] == benchmark) & (self.expected["method"] == method)]
        return len(rows) or None

    def planned_step_cost(self, benchmark: str, method: str) -> float | None:
        """The counted cost of one step of the arm as the grid planned it (None: not in the grid)."""
        if "planned_step_cost" not in self.expected.columns:
            return None
        rows = self.expected[(self.expected["benchmark"] == benchmark) & (self.expected["method"] == method)]
        return float(rows["planned_step_cost"].iloc[0]) if len(rows) else None


def load_reference(path: Path = REFERENCE_CSV) -> pd.DataFrame:
    return pd.read_csv(path)


def reference_of(profile: str | None, config_dir: str | Path = "config") -> Path:
    """The published numbers a profile's main table prints beside its own (``grid.published``, a file in
    paper_figures/reference/); the SHARPO paper's without a profile."""
    if profile is None:
        return REFERENCE_CSV
    from harness.core.typed import ConfigError
    from harness.grid.runs import profile_path
    from harness.job_slices import grid_section

    path = profile_path(profile, config_dir)
    grid = grid_section(path)
    found = REFERENCE_CSV.parent / grid.published
    if not found.is_file():
        shipped = sorted(p.name for p in REFERENCE_CSV.parent.glob("*.csv"))
        raise ConfigError(f"{path}: grid.published={grid.published!r} is not a file in {REFERENCE_CSV.parent} "
                          f"(there: {shipped}); add the CSV there or name one of these")
    return found


def reference_sources(reference: pd.DataFrame) -> str:
    """The papers a reference table quotes, for a caption: ``arXiv 2505.10978 (GiGPO); arXiv 2602.22817 (HGPO)``."""
    return "; ".join(dict.fromkeys(str(source).split(",")[0] for source in reference["source"]))


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
            if exact_for(results, bench):  # the primary number is exact: the sampled rate beside it
                line[f"{name} (sampled)"] = _cell(runs["success_sampled"], ctx.n_expected(bench, method))[0]
            line[f"{name} (paper)"] = render.fmt_pm(paper_mean, paper_pm, digits=2, scale=1.0)
        display.append(line)
    display = render.add_roles(pd.DataFrame(display), methods)
    return pd.DataFrame(tidy), premise.add_notes(display, methods, benchmarks, ctx.notes)


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
                expected = ctx.n_expected(bench, method)
                line[render.benchmark_name(bench)], (mean, half, n) = _cell(runs["success"], expected)
                tidy.append({"benchmark": bench, "method": method, key: value, "n_seeds": n,
                             "success_pct": mean * 100, "ci95_pct": half * 100})
            display.append(line)
    return pd.DataFrame(tidy), pd.DataFrame(display)


def seed_scores(results: Results, benchmark: str, metric: str = "success") -> dict[str, bootstrap.SeedScores]:
    """{method: final-eval episodes by seed and task type}; task types missing from some run are left out."""
    episodes = results.final_episodes[results.final_episodes["benchmark"] == benchmark]
    scores = bootstrap.seed_scores(episodes, metric)
    all_types = set(episodes["task_type"].astype(str))
    kept = next(iter(scores.values())).types if scores else ()
    if len(kept) < len(all_types):
        warnings.warn(f"{benchmark}: task type(s) {sorted(all_types - set(kept))} are missing from some runs and are "
                      "left out of the bootstrap statistics", stacklevel=2)
    return scores


RLIABLE_RESAMPLED = ("hierarchical bootstrap: seeds resampled, then episodes within each seed and task type; "
                     "rliable tasks = task types; percentile interval widened for the seed count")


def paired_with(scores: dict, baseline: str) -> list[str]:
    """The arms with ≥ 2 seeds in common with ``baseline``: the P(> baseline) comparisons that give an interval."""
    base = scores.get(baseline)
    return [m for m, s in scores.items() if m != baseline and base and len(set(s.seeds) & set(base.seeds)) >= 2]


def rliable_table(results: Results, ctx: Context, benchmark: str, metric: str = "success"):
    """IQM and mean with 95% intervals from a bootstrap over seeds (then episodes), and P(method > baseline) paired
    by seed, its intervals Bonferroni-adjusted for the arms compared; methods first, then the controls."""
    scores = seed_scores(results, benchmark, metric)
    if not scores:
        return None
    estimates = bootstrap.interval_estimates(scores, reps=ctx.reps, seed=ctx.seed)
    m = len(paired_with(scores, ctx.baseline))
    confidence = stats.bonferroni_confidence(m)
    improvement = bootstrap.improvement_over(scores, ctx.baseline, reps=ctx.reps, seed=ctx.seed,
                                             confidence=confidence)
    tidy, display = [], []
    base_name = render.method_name(ctx.baseline)
    methods = render.methods_then_controls(methods_of(results, ctx, [benchmark]))
    for method in methods:
        line = {"Method": render.arm_name(method), "Seeds × task types": render.MISSING}
        row = {"benchmark": benchmark, "metric": metric, "method": method, "role": render.role(method) or "method",
               "resampled": RLIABLE_RESAMPLED, "prob_m": m, "prob_confidence": confidence}
        if method in scores:
            line["Seeds × task types"] = f"{scores[method].n_seeds} × {len(scores[method].types)}"
            row.update({"n_seeds": scores[method].n_seeds, "n_task_types": len(scores[method].types)})
        for name in bootstrap.AGGREGATES:
            point, low, high = estimates.get(method, {}).get(name, (np.nan,) * 3)
            line[name] = render.fmt_interval(point, low, high)
            row.update({name.lower(): point, f"{name.lower()}_low": low, f"{name.lower()}_high": high})
        point, low, high = improvement.get(method, (np.nan,) * 3)
        line[f"P(> {base_name})"] = render.fmt_interval(point, low, high, digits=2, scale=1.0)
        row.update({"prob_improvement": point, "prob_improvement_low": low, "prob_improvement_high": high})
        line["Role"] = row["role"]
        tidy.append(row)
        display.append(line)
    return pd.DataFrame(tidy), premise.add_notes(pd.DataFrame(display), methods, [benchmark], ctx.notes)


def rliable_note(tidy: pd.DataFrame, baseline: str) -> str:
    """The end of an rliable table's caption: how many arms P(> baseline) compares, and at what level."""
    m, confidence = int(tidy["prob_m"].iloc[0]), float(tidy["prob_confidence"].iloc[0])
    return f"P intervals: m = {m} arms compared with {render.method_name(baseline)}, each at {confidence:.2%}"


def exact_for(results: Results, benchmark: str) -> bool:
    """Whether the runs of ``benchmark`` report an exact success (they then carry the sampled rate beside it)."""
    runs = results.runs[results.runs["benchmark"] == benchmark]
    return "success_sampled" in runs and bool(runs["success_sampled"].notna().any())


def runs_table(results: Results, ctx: Context):
    """One row per finished run: its final success (exact where the benchmark gives it) and score, the numbers
    ``--against`` compares."""
    columns = ["benchmark", "method", "seed", "steps", "success", "score"]
    tidy = results.runs[columns].sort_values(["benchmark", "method", "seed"]).reset_index(drop=True)
    display = tidy.assign(Method=[render.method_name(m) for m in tidy["method"]],
                          **{"success %": tidy["success"] * 100, "score %": tidy["score"] * 100})
    display = display[["benchmark", "Method", "seed", "steps", "success %", "score %"]].round(2)
    return tidy, display


def cost_table(results: Results, ctx: Context):
    """Wall time per run, where the time of a training step goes (generation, env, teacher, update), and each arm's
    cost against the baseline's: planned (the counted token positions the compute-matched arm was planned from,
    harness/grid/compute_match.py), measured in token positions (``cost/tokens``) and in step time; with the
    optimizer steps a step."""
    time_columns = [c for c in results.metrics.columns if c.startswith("time/")]
    ratio_columns = [c for c in ("cost/tokens", "time/step_s") if c in results.metrics.columns]
    per_run = results.metrics.groupby(["benchmark", "method", "seed"])[
        list(dict.fromkeys(time_columns + ratio_columns + _present(results, "actor/optimizer_steps")))].mean()
    arm_means = per_run.groupby(["benchmark", "method"]).mean()
    tidy, display = [], []
    for bench in benchmarks_of(results, ctx):
        for method in methods_of(results, ctx, [bench]):
            runs = results.runs[(results.runs["benchmark"] == bench) & (results.runs["method"] == method)]
            row = {"benchmark": bench, "method": method, "n_runs": len(runs),
                   "wall_time_min": runs["wall_time_s"].astype(float).mean() / 60, "steps": runs["steps"].max()}
            line = {"Benchmark": render.benchmark_name(bench), "Method": render.method_name(method),
                    "Runs": len(runs), "Wall time / run (min)": render.fmt_pm(row["wall_time_min"], None, 1, 1.0)}
            if (bench, method) in arm_means.index:
                means = arm_means.loc[(bench, method)]
                for column in time_columns:
                    row[f"{column}_mean_s"] = means[column]
                    line[f"{column.removeprefix('time/')} s/step"] = render.fmt_pm(means[column], None, 2, 1.0)
                if "actor/optimizer_steps" in means:
                    row["optimizer_steps"] = means["actor/optimizer_steps"]
                    line["Optimizer steps / step"] = render.fmt_pm(means["actor/optimizer_steps"], None, 1, 1.0)
            _cost_ratios(row, line, arm_means, ctx, bench, method, ratio_columns)
            tidy.append(row)
            display.append(line)
    return pd.DataFrame(tidy), pd.DataFrame(display).fillna(render.MISSING)


def _present(results: Results, column: str) -> list[str]:
    return [column] if column in results.metrics.columns else []


def _cost_ratios(row: dict, line: dict, arm_means: pd.DataFrame, ctx: Context, bench: str, method: str,
                 measured: list[str]) -> None:
    """The arm's cost over the baseline's: planned, then measured (token positions, step time)."""
    base = ctx.baseline
    planned = ctx.planned_step_cost(bench, method), ctx.planned_step_cost(bench, base)
    row["planned_ratio"] = planned[0] / planned[1] if None not in planned else float("nan")
    line[f"Planned × {render.method_name(base)}"] = render.fmt_pm(row["planned_ratio"], None, 2, 1.0)
    for column, name, title in (("cost/tokens", "token_ratio", "Tokens"), ("time/step_s", "step_time_ratio",
                                                                          "Step time")):
        have = column in measured and {(bench, method), (bench, base)} <= set(arm_means.index)
        row[name] = arm_means.loc[(bench, method), column] / arm_means.loc[(bench, base), column] if have \
            else float("nan")
        line[f"{title} × {render.method_name(base)} (measured)"] = render.fmt_pm(row[name], None, 2, 1.0)
