"""Regenerate every table and figure from the finished runs: ``build(runs_dir, out_dir, ...)``."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from harness.grid.runs import FROZEN
from paper_figures import bootstrap, control, credit, oracle_share, plots, premise, render, tables
from paper_figures.load import Results, load_runs


def expected_runs(profile: str | None, config_dir: str | Path = "config") -> tuple[pd.DataFrame, list[str] | None]:
    """(benchmark, method, seed) of every run in the profile's grid, and the grid's method order."""
    if profile is None:
        return pd.DataFrame(columns=["benchmark", "method", "seed"]), None
    from harness.grid.runs import load_grid

    grid = load_grid(profile, config_dir)
    frame = pd.DataFrame([{"benchmark": r.benchmark, "method": r.label, "seed": r.seed} for r in grid.runs])
    planned = planned_step_costs(grid)
    frame["planned_step_cost"] = [planned[key] for key in zip(frame["benchmark"], frame["method"])]
    return frame, grid.method_labels


def planned_step_costs(grid) -> dict[tuple[str, str], float]:
    """(benchmark, arm) → the counted token positions of one of its steps, as the compute-matched arm was planned
    (harness/grid/compute_match.py: the profile's token basis)."""
    from harness.grid.compute_match import arm_costs, load_basis

    basis = load_basis(grid.compute_basis) if grid.compute_basis else None
    arms = {(r.benchmark, r.label): r for r in grid.runs}
    return {key: arm_costs(grid.profile_path, run.override_items(), basis)[0] for key, run in arms.items()}


def drop_stale(results: Results, profile: str | None, config_dir, tables_dir: Path) -> tuple[Results, list[Path]]:
    """With a profile: leave out (and list in tables/stale_runs.csv) the runs made under another protocol."""
    if profile is None:
        return results, []
    from harness.grid.identity import expected_records, find_stale, warn_stale

    stale = find_stale(results.runs, expected_records(profile, config_dir))
    warn_stale(stale)
    tables_dir.mkdir(parents=True, exist_ok=True)
    stale.to_csv(tables_dir / "stale_runs.csv", index=False)
    keys = set(zip(stale["benchmark"], stale["method"], stale["seed"].astype(int)))
    return results.without(keys), [tables_dir / "stale_runs.csv"]


def missing_runs(results: Results, expected: pd.DataFrame) -> pd.DataFrame:
    found = set(results.runs[["benchmark", "method", "seed"]].itertuples(index=False, name=None))
    keys = expected[["benchmark", "method", "seed"]].itertuples(index=False, name=None)
    rows = [r for r in keys if (r[0], r[1], int(r[2])) not in found]
    return pd.DataFrame(rows, columns=["benchmark", "method", "seed"])


def _write(out: list[Path], table, tables_dir: Path, name: str, caption: str) -> None:
    """Write (tidy, display) or (tidy, display, caption note); the note ends the caption (e.g. each benchmark's
    number of comparisons, known only from the runs)."""
    if table is not None:
        if len(table) > 2:
            caption = f"{caption}. {table[2]}"
        out += render.write_table(tables_dir, name, table[0], table[1], caption)


PAIRED = ("paired by seed (same warm start, eval tasks and sampling seeds; the per-seed difference is the unit): "
          "mean ± Student-t interval over seeds, and P(> {ref}) = share of seeds whose run beats the same seed's "
          "{ref} run (ties ½) with a bootstrap that resamples seed indices once for both arms; intervals "
          "Bonferroni-adjusted for the m comparisons of the benchmark's column (methods and controls all count), "
          "each at 1 − 0.05/m; 'CI > 0' reads the adjusted interval. Controls are listed below the methods and "
          "not ranked")


def gain_tables(results: Results, ctx: tables.Context, tables_dir: Path, out: list[Path]) -> None:
    """gain_over_frozen, gain_over_<baseline>, share_of_oracle and power: the comparisons paired by seed."""
    base = render.method_name(ctx.baseline)
    for reference, name, shown in ((FROZEN, "gain_over_frozen", "the frozen (lr 0) control"),
                                   (ctx.baseline, f"gain_over_{ctx.baseline}", base)):
        table = control.control_table(results, ctx, control=reference)
        if table is not None:
            table = (*table, control.caption_note(table[0]))
        ref = "frozen" if reference == FROZEN else base
        _write(out, table, tables_dir, name, f"Final success minus {shown}'s, " + PAIRED.format(ref=ref))
    _write(out, oracle_share.share_table(results, ctx), tables_dir, "share_of_oracle", oracle_share.CAPTION)
    power = oracle_share.power_table(results, ctx)
    _write(out, power, tables_dir, "power", oracle_share.POWER_CAPTION)
    for line in [] if power is None else power[0].dropna(subset=["seeds_needed"]).itertuples(index=False):
        print(f"paper_figures: power: {render.benchmark_name(line.benchmark)}: {line.seeds_needed} seeds resolve "
              f"{line.target_pct:+.1f} points (half of {render.method_name(line.oracle)}'s gain) at paired SD "
              f"{line.sd_pct:.1f}, m = {line.m}; the grid has {line.n_seeds}")


def write_tables(results: Results, ctx: tables.Context, tables_dir: Path) -> tuple[list[Path], dict]:
    """Every table; returns the paths and the rliable tidy frames (the figures reuse them)."""
    out: list[Path] = []
    benchmarks = tables.benchmarks_of(results, ctx)
    exact = [render.benchmark_name(b) for b in benchmarks if tables.exact_for(results, b)]
    _write(out, tables.main_table(results, ctx), tables_dir, "main",
           "Success % of the final evaluation, mean ± 95% CI (Student t) over seeds; paper = "
           + tables.reference_sources(ctx.reference)
           + (f". {', '.join(exact)}: the policy's exact success probability at the eval temperature, averaged over "
              f"the eval panel (no episode sampling noise; envs/gates/exact.py), the sampled episodes' rate beside it"
              if exact else ""))
    gain_tables(results, ctx, tables_dir, out)
    for bench in benchmarks:
        episodes = results.final_episodes[results.final_episodes["benchmark"] == bench]
        if episodes["task_type"].nunique() > 1:
            _write(out, tables.breakdown_table(results, ctx, bench, "task_type"), tables_dir, f"task_types_{bench}",
                   f"{render.benchmark_name(bench)}: success % per task type, mean ± 95% CI over seeds")
    if "webshop" in benchmarks:
        _write(out, tables.score_success_table(results, ctx, "webshop"), tables_dir, "webshop",
               "WebShop: score (0–100) and success %, mean ± 95% CI over seeds")
    _write(out, tables.sweep_table(results, ctx, "lam"), tables_dir, "lambda_sensitivity",
           "Sensitivity to λ: success %, mean ± 95% CI over seeds")
    rliable_frames = {}
    for bench in benchmarks:
        table = tables.rliable_table(results, ctx, bench, "success")
        table = table and (*table, tables.rliable_note(table[0], ctx.baseline))
        _write(out, table, tables_dir, f"rliable_{bench}",
               f"{render.benchmark_name(bench)}: IQM and mean success % with 95% intervals from a hierarchical "
               f"bootstrap ({ctx.reps} resamples: training seeds, then eval episodes within each seed; rliable's "
               f"tasks are the task types); P(> {render.method_name(ctx.baseline)}) paired by seed (the share of "
               f"seeds and task types whose run beats the same seed's, seed indices resampled once for both arms), "
               f"its intervals Bonferroni-adjusted for the m arms compared; intervals widened for the seed count "
               f"(docs/results.md); controls listed below the methods, not ranked")
        if table is not None:
            rliable_frames[bench] = table[0]
    for bench in benchmarks:
        methods = tables.methods_of(results, ctx, [bench])
        _write(out, premise.premise_table(results, methods, bench), tables_dir, f"premise_{bench}",
               f"{render.benchmark_name(bench)}: the premise of each method, per-step metrics averaged over the run, "
               "then over runs; a run is 'teacher uninformative' when its mean gap on wins is not above its mean "
               "gap on losses (docs/results.md)")
        _write(out, credit.credit_table(results, methods, bench, ctx.reps, ctx.seed), tables_dir, f"credit_{bench}",
               f"{render.benchmark_name(bench)}: {credit.CAPTION}")
    if not results.empty():
        _write(out, tables.cost_table(results, ctx), tables_dir, "cost",
               "Cost: wall time per run and per training step, and each arm's cost over GRPO's: planned (the "
               "counted token positions of a step, from the profile's token basis; harness/grid/compute_match.py), "
               "measured in token positions (cost/tokens) and in step time (means over steps, then seeds); optimizer "
               "steps per RL step")
        _write(out, tables.runs_table(results, ctx), tables_dir, "runs",
               "Final success and score of every finished run (compared by `python -m paper_figures --against`)")
    missing = missing_runs(results, ctx.expected)
    missing.to_csv(tables_dir / "missing_runs.csv", index=False)
    return [*out, tables_dir / "missing_runs.csv"], rliable_frames


def write_figures(results: Results, ctx: tables.Context, rliable_frames: dict, figures_dir: Path) -> list[Path]:
    if results.empty():
        return []
    plots.set_style()
    benchmarks = sorted(results.runs["benchmark"].unique())
    methods = tables.methods_of(results, ctx, benchmarks)
    out = plots.learning_curves(results, methods, benchmarks, figures_dir)
    for bench in benchmarks:
        out += plots.diagnostics(results, methods, bench, figures_dir)
        credit_columns = credit.present(results.metrics[results.metrics["benchmark"] == bench])
        if credit_columns:
            out += plots.credit(results, methods, bench, credit_columns, figures_dir)
        if bench in rliable_frames:
            out += plots.rliable_intervals(rliable_frames[bench], methods, bench, ctx.baseline, figures_dir)
    taus = np.linspace(0, 1, 50, endpoint=False)
    profiles = {b: bootstrap.performance_profiles(results.final_episodes[results.final_episodes["benchmark"] == b],
                                                  "score", taus, reps=ctx.reps, seed=ctx.seed) for b in benchmarks}
    out += plots.performance_profiles(profiles, methods, benchmarks, "score", figures_dir)
    return out


def build(runs_dir: str | Path = "results/runs", out_dir: str | Path = "results", profile: str | None = None,
          config_dir: str | Path = "config", reps: int = 2000, seed: int = 0, baseline: str = "grpo",
          figures: bool = True) -> list[Path]:
    """Read every finished run under ``runs_dir``; write ``out_dir``/tables and ``out_dir``/figures.

    With a ``profile`` the grid's unfinished runs are marked in the tables ("—" or "(n/N)" seeds) and listed in
    ``tables/missing_runs.csv``; without one, only what was found is shown.
    """
    started = time.perf_counter()
    results = load_runs(runs_dir)
    out_dir = Path(out_dir)
    results, stale_paths = drop_stale(results, profile, config_dir, out_dir / "tables")
    expected, order = expected_runs(profile, config_dir)
    reference = tables.load_reference(tables.reference_of(profile, config_dir))  # the profile's grid.published
    ctx = tables.Context(expected=expected, reference=reference, order=order, baseline=baseline,
                         reps=reps, seed=seed, notes=premise.notes(results.metrics))
    for (bench, method), text in ctx.notes.items():
        print(f"paper_figures: warning: {render.benchmark_name(bench)} {render.method_name(method)}: {text}")
    table_paths, rliable_frames = write_tables(results, ctx, out_dir / "tables")
    table_paths += stale_paths
    figure_paths = write_figures(results, ctx, rliable_frames, out_dir / "figures") if figures else []
    print(f"paper_figures: {len(results.runs)} finished run(s), {len(missing_runs(results, expected))} missing; "
          f"wrote {len(table_paths)} table and {len(figure_paths)} figure files under {out_dir} "
          f"in {time.perf_counter() - started:.1f} s")
    return table_paths + figure_paths
