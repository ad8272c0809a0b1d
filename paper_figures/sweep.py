"""The sweep figure and table: final success and the credit scores against a grid setting (``grid.settings``).

A profile whose grid sweeps a setting (config/sweep.yaml: ``gates.horizon`` 4 / 8 / 16) runs every method and
seed once per setting, in a folder labelled ``<method>@<setting>`` (harness.grid.runs). Per run this module reads
the final eval success and the credit scores the engine logged at every training step (harness/engine/credit.py,
docs/credit.md): a run's score is the AUROC averaged over every eligible episode of its training steps (each
step's mean weighted by its ``credit/*_episodes``). Per method and setting it draws the mean over seeds with the
95% Student-t interval over seeds, the same interval as the tables.

    python -m paper_figures.sweep --runs results/sweep/runs --out results/sweep --profile sweep
"""
from __future__ import annotations

import argparse
import numbers
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from harness.grid.runs import Grid, load_grid, split_setting_label
from paper_figures import credit, plots, render, stats
from paper_figures.load import Results, load_runs

# (column, metric logged per step, panel title, scale to display)
SCORES = (("success", None, "final eval success %", 100.0),
          ("fatal_auroc", "credit/fatal_auroc", "fatal-turn AUROC (lost episodes)", 1.0),
          ("detour_auroc", "credit/detour_auroc", "correct-vs-detour AUROC (won)", 1.0))
COLUMNS = ["benchmark", "method", "setting", "x", "seed", *(s[0] for s in SCORES)]


def sweep_axis(grid: Grid) -> tuple[str, dict[str, object]]:
    """(axis name, setting tag → x value): the one key that varies across the settings and its values; when
    several keys vary, the tags themselves (a categorical axis)."""
    settings = {run.setting for run in grid.runs if run.setting}
    if not settings:
        raise ValueError(f"profile {grid.profile}: its grid has no settings to sweep (grid.settings)")
    keys = sorted({key for setting in settings for key, _ in setting})
    varying = [k for k in keys if len({dict(s).get(k) for s in settings}) > 1]
    tags = {split_setting_label(run.label)[1]: dict(run.setting) for run in grid.runs if run.setting}
    if len(varying) == 1:
        return varying[0], {tag: setting.get(varying[0]) for tag, setting in tags.items()}
    return "setting", {tag: tag for tag in tags}


def sweep_frame(results: Results, grid: Grid) -> tuple[pd.DataFrame, str]:
    """(one row per finished run of the sweep: its method without the setting, setting tag, x value, seed, final
    success and credit scores; the axis name)."""
    axis_name, x_of = sweep_axis(grid)
    runs = results.runs[["benchmark", "method", "seed", "success"]].copy()
    if not results.metrics.empty:
        per_run = credit.run_credit(results.metrics).rename(columns={m: c for c, m, *_ in SCORES[1:]})
        runs = runs.merge(per_run, on=credit.RUN_KEYS, how="left")
    split = runs["method"].map(split_setting_label)
    runs["setting"] = split.map(lambda pair: pair[1])
    runs["method"] = split.map(lambda pair: pair[0])
    runs = runs[runs["setting"].isin(x_of)].copy()  # runs of the grid's settings only
    runs["x"] = runs["setting"].map(x_of)
    return runs.reindex(columns=COLUMNS).reset_index(drop=True), axis_name


def method_order(grid: Grid) -> list[str]:
    return list(dict.fromkeys(split_setting_label(label)[0] for label in grid.method_labels))


def ordered(frame: pd.DataFrame, methods: list[str]) -> pd.DataFrame:
    """Rows by benchmark, the grid's method order, then the setting's value."""
    rank = {m: i for i, m in enumerate(methods)}
    keys = [(b, rank.get(m, len(rank)), m, _sortable(x))
            for b, m, x in zip(frame["benchmark"], frame["method"], frame["x"])]
    return frame.iloc[sorted(range(len(frame)), key=keys.__getitem__)]


def sweep_table(frame: pd.DataFrame, methods: list[str], axis: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(tidy: mean, half-width and n per benchmark, method, x and score; display: one row per method and x)."""
    tidy, display = [], []
    for (bench, method, x), cell in ordered(frame, methods).groupby(["benchmark", "method", "x"], sort=False):
        row = {"benchmark": render.benchmark_name(bench), "method": render.method_name(method), "x": x}
        for column, _, _, scale in SCORES:
            mean, half, n = stats.mean_ci(cell[column].to_numpy(dtype=float))
            tidy.append({"benchmark": bench, "method": method, "x": x, "score": column, "mean": mean, "half": half,
                         "n": n})
            row[column] = render.fmt_pm(mean, half, digits=1 if scale > 1 else 3, scale=scale)
        display.append(row)
    return pd.DataFrame(tidy), pd.DataFrame(display).rename(columns={"x": axis})


def _sortable(value):
    return (0, float(value), "") if _is_number(value) else (1, 0.0, str(value))


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def sweep_figure(frame: pd.DataFrame, methods: list[str], axis: str, out_dir: Path) -> list[Path]:
    """Per benchmark (rows) and score (columns): mean over seeds against the setting, 95% t interval bars."""
    plots.set_style()
    colors = plots.palette(methods)
    benchmarks = sorted(frame["benchmark"].unique())
    numeric = all(_is_number(x) for x in frame["x"])
    positions = {x: i for i, x in enumerate(sorted(frame["x"].unique(), key=_sortable))}
    fig, axes = plots.plt.subplots(len(benchmarks), len(SCORES), figsize=(4.4 * len(SCORES), 3.3 * len(benchmarks)),
                                   squeeze=False)
    for row, bench in enumerate(benchmarks):
        of_bench = frame[frame["benchmark"] == bench]
        for col, (column, _, title, scale) in enumerate(SCORES):
            ax = axes[row, col]
            band = plots.seed_band(of_bench.dropna(subset=[column]), "x", column)
            ax.set(title=f"{render.benchmark_name(bench)}: {title}", xlabel=axis)
            if band.empty:  # e.g. no won episode of any run took a detour: say so rather than draw empty axes
                ax.text(0.5, 0.5, "no run had an eligible episode", ha="center", va="center",
                        transform=ax.transAxes, color="0.4")
                ax.set_xticks([])
                continue
            for index, method in enumerate(methods):
                line = band[band["method"] == method].sort_values("x", key=lambda s: s.map(_sortable))
                if line.empty:
                    continue
                # methods side by side (equal values would hide each other); a score stays within [0, 1]
                dodge = (index - (len(methods) - 1) / 2) * 0.04
                xs = line["x"] * 2.0 ** dodge if numeric else line["x"].map(positions) + dodge
                low = line["mean"] - np.clip(line["mean"] - line["half"], 0.0, 1.0)
                high = np.clip(line["mean"] + line["half"], 0.0, 1.0) - line["mean"]
                ax.errorbar(xs, line["mean"] * scale, yerr=[low * scale, high * scale], color=colors[method],
                            marker="o", capsize=3, lw=1.5, label=render.method_name(method))
            if column != "success":
                ax.axhline(0.5, color="0.5", lw=0.8, ls="--")  # a method that does not rank the turns: 0.5
            if numeric:
                ax.set_xscale("log", base=2)
                ax.set_xticks(sorted(positions), [str(x) for x in sorted(positions)])
            else:
                ax.set_xticks(list(positions.values()), list(positions))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5) or 1, frameon=False)
    fig.tight_layout(rect=(0, 0.1 / len(benchmarks), 1, 1))
    return plots.save(fig, out_dir, "sweep")


def build_sweep(runs_dir: str | Path, out_dir: str | Path, profile: str, config_dir: str | Path = "config"
                ) -> list[Path]:
    """Write ``out_dir``/tables/sweep.{csv,md,tex} and ``out_dir``/figures/sweep.{png,pdf}."""
    grid = load_grid(profile, config_dir)
    frame, axis = sweep_frame(load_runs(runs_dir), grid)
    if frame.empty:
        raise FileNotFoundError(f"no finished run of the sweep under {runs_dir}; train them first (snakemake)")
    methods = method_order(grid)
    tidy, display = sweep_table(frame, methods, axis)
    caption = (f"Against {axis}: final eval success %, and the credit AUROCs (docs/credit.md; 0.5 = "
               "no ranking), mean ± 95% CI (Student t) over seeds")
    out = render.write_table(Path(out_dir) / "tables", "sweep", tidy, display, caption)
    return out + sweep_figure(frame, methods, axis, Path(out_dir) / "figures")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_figures.sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", required=True, help="root of the sweep's run folders (the profile's output_dir)")
    parser.add_argument("--out", required=True, help="writes OUT/tables/sweep.* and OUT/figures/sweep.*")
    parser.add_argument("--profile", required=True, help="the sweep profile (e.g. sweep, or a YAML path)")
    parser.add_argument("--config-dir", default="config", help="where profiles live (default: config)")
    args = parser.parse_args(argv)
    try:
        paths = build_sweep(args.runs, args.out, args.profile, args.config_dir)
    except (FileNotFoundError, ValueError) as err:
        print(f"paper_figures.sweep: error: {err}", file=sys.stderr)
        return 2
    print(f"paper_figures.sweep: wrote {len(paths)} files under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
