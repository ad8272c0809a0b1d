"""The paper's figures (PNG and PDF): learning curves, method diagnostics, rliable intervals and performance
profiles. Bands are the 95% Student-t CI over seeds (the same as the tables); one seed draws a line, no band.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display; must precede pyplot

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from paper_figures import render, stats  # noqa: E402
from paper_figures.credit import CREDIT_METRICS  # noqa: E402

DIAGNOSTIC_EXTRAS = ("logp_gap", "degenerate_group_frac")


def set_style() -> None:
    sns.set_theme(context="paper", style="whitegrid", font_scale=1.1)
    plt.rcParams.update({"figure.dpi": 100, "savefig.bbox": "tight", "pdf.fonttype": 42, "ps.fonttype": 42})


def palette(methods: list[str]) -> dict[str, tuple]:
    """One colour per method, the same in every figure; past the colour-blind palette's 10 colours (a grid with
    GiGPO, HGPO, AgentOPSD and both controls has 11 arms) tab20's 20, so no two arms share a colour."""
    name = "colorblind" if len(methods) <= 10 else "tab20"
    return dict(zip(methods, sns.color_palette(name, max(len(methods), 1))))


def save(fig, out_dir: Path, name: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.{ext}" for ext in ("png", "pdf")]
    for path in paths:
        fig.savefig(path, dpi=200)
    plt.close(fig)
    return paths


def seed_band(frame: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Per (method, x): mean over seeds of ``y`` and its CI half-width (``frame`` has one value per seed)."""
    rows = []
    for (method, x_value), values in frame.groupby(["method", x])[y]:
        mean, half, n = stats.mean_ci(values.to_numpy())
        rows.append({"method": method, x: x_value, "mean": mean, "half": 0.0 if math.isnan(half) else half, "n": n})
    return pd.DataFrame(rows, columns=["method", x, "mean", "half", "n"])


def draw_bands(ax, band: pd.DataFrame, x: str, colors: dict, scale: float = 1.0, limits=(-np.inf, np.inf)) -> None:
    """Mean line and CI band per method; ``limits`` clip the band to the metric's range (a rate stays in
    [0, 1] even when two seeds give a wide t interval)."""
    for method, line in band.groupby("method", sort=False):
        line = line.sort_values(x).dropna(subset=["mean"])
        if line.empty:
            continue
        color = colors.get(method)
        low, high = (np.clip(line["mean"] + sign * line["half"], *limits) * scale for sign in (-1, 1))
        ax.plot(line[x], line["mean"] * scale, color=color, label=render.method_name(method), lw=1.6)
        ax.fill_between(line[x], low, high, color=color, alpha=0.2, lw=0)


def smooth(frame: pd.DataFrame, column: str, window: int) -> pd.DataFrame:
    """Trailing rolling mean of ``column`` over steps within each run (training success is noisy per step)."""
    frame = frame.sort_values(["method", "seed", "step"]).copy()
    frame[column] = frame.groupby(["method", "seed"])[column].transform(lambda s: s.rolling(window, 1).mean())
    return frame


def _legend(fig, axes, methods: list[str], title_inches: float = 0.0) -> None:
    """One legend under the panels, in the methods' order, with room made for it (and for a figure title of
    ``title_inches`` above the panels' own titles)."""
    handles = {}
    for ax in np.ravel(axes):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    labels = [render.method_name(m) for m in methods if render.method_name(m) in handles]
    top = 1 - title_inches / fig.get_figheight()
    if not labels:
        fig.tight_layout(rect=(0, 0, 1, top))
        return
    ncol = min(len(labels), 4)
    fig.legend([handles[label] for label in labels], labels, loc="lower center", ncol=ncol, frameon=False)
    legend_inches = 0.3 * math.ceil(len(labels) / ncol) + 0.15
    fig.tight_layout(rect=(0, legend_inches / fig.get_figheight(), 1, top))


def _ordered(band: pd.DataFrame, methods: list[str]) -> pd.DataFrame:
    rank = {m: i for i, m in enumerate(methods)}
    return band.sort_values("method", key=lambda s: s.map(rank), kind="stable")


def learning_curves(results, methods: list[str], benchmarks: list[str], out_dir: Path) -> list[Path]:
    """Eval success (left) and training success (right) against the training step, per benchmark."""
    colors = palette(methods)
    train_column = "train/success" if "train/success" in results.metrics.columns else None
    ncols = 2 if train_column else 1
    fig, axes = plt.subplots(len(benchmarks), ncols, figsize=(5.2 * ncols, 3.4 * len(benchmarks)), squeeze=False)
    for row, bench in enumerate(benchmarks):
        evals = results.evals[results.evals["benchmark"] == bench]
        per_run = evals.groupby(["method", "seed", "step"])["success"].mean().reset_index()
        draw_bands(axes[row, 0], _ordered(seed_band(per_run, "step", "success"), methods), "step", colors, 100, (0, 1))
        axes[row, 0].set(title=f"{render.benchmark_name(bench)}: eval success", xlabel="training step",
                         ylabel="success %")
        if train_column:
            train = results.metrics[results.metrics["benchmark"] == bench][["method", "seed", "step", train_column]]
            window = max(1, int(train["step"].max()) // 20) if len(train) else 1
            band = seed_band(smooth(train.dropna(), train_column, window), "step", train_column)
            draw_bands(axes[row, 1], _ordered(band, methods), "step", colors, 100, (0, 1))
            axes[row, 1].set(title=f"{render.benchmark_name(bench)}: training success (mean of {window} steps)",
                             xlabel="training step",
                             ylabel="success %")
    _legend(fig, axes, methods)
    return save(fig, out_dir, "learning_curves")


INFORMATIVENESS = "teacher/gap_success − gap_failure"
# The premise panels lead, in the order a reader checks them: did the context fit, did the teacher know more on
# wins than on losses, did the groups have mixed outcomes. Then the raw gaps and the methods' own statistics.
PREMISE_PANELS = ["teacher/truncated_frac", "method/teacher_truncated_frac", INFORMATIVENESS, "teacher/better_frac",
                  "degenerate_group_frac", "method/zero_adv_frac", "teacher/gap_success", "teacher/gap_failure",
                  "teacher/available_frac", "method/teacher_available_frac"]
PANEL_TITLES = {
    "teacher/truncated_frac": "premise: teacher rows truncated", "method/teacher_truncated_frac":
    "premise: teacher rows truncated", INFORMATIVENESS: "premise: δ on wins − δ on losses (> 0)",
    "teacher/better_frac": "premise: rows with δ > 0", "degenerate_group_frac": "premise: single-outcome groups",
    "method/zero_adv_frac": "premise: rows with A = 0",
    "credit/fatal_auroc": "fatal turn picked out (lost episodes)", "credit/detour_auroc": "correct over detour (won)",
}


def is_fraction(column: str) -> bool:
    """A share or a rate: its band is clipped to [0, 1] and its axis shows the whole range."""
    return column.endswith(("_frac", "_ratio", "_rate", "auroc"))


def diagnostic_columns(metrics: pd.DataFrame) -> list[str]:
    """The panels of the diagnostics figure: the premise ones first, then the methods' statistics by name."""
    columns = [c for c in metrics.columns if c.startswith(("method/", "teacher/")) or c in DIAGNOSTIC_EXTRAS]
    columns = [c for c in columns if metrics[c].notna().any()]
    if {"teacher/gap_success", "teacher/gap_failure"} <= set(columns):
        columns.append(INFORMATIVENESS)
    if "teacher/truncated_frac" in columns and "method/teacher_truncated_frac" in columns:
        columns.remove("method/teacher_truncated_frac")  # the same number under the engine's older name
    first = [c for c in PREMISE_PANELS if c in columns]
    return first + sorted(c for c in columns if c not in first)


def with_informativeness(metrics: pd.DataFrame) -> pd.DataFrame:
    if {"teacher/gap_success", "teacher/gap_failure"} <= set(metrics.columns):
        return metrics.assign(**{INFORMATIVENESS: metrics["teacher/gap_success"] - metrics["teacher/gap_failure"]})
    return metrics


def panel_grid(metrics: pd.DataFrame, columns: list[str], methods: list[str], title: str, out_dir: Path, name: str,
               ncols: int = 3, notes: dict[str, str] | None = None) -> list[Path]:
    """One panel per metric column against the training step: mean over seeds with its 95% t band; ``notes``
    puts a line of text in a column's panel (how much data it rests on)."""
    colors = palette(methods)
    ncols = min(ncols, len(columns))
    nrows = math.ceil(len(columns) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 3.0 * nrows + 1.0), squeeze=False)
    for ax, column in zip(axes.ravel(), columns):
        band = seed_band(metrics[["method", "seed", "step", column]].dropna(), "step", column)
        fraction = is_fraction(column)
        draw_bands(ax, _ordered(band, methods), "step", colors, limits=(0, 1) if fraction else (-np.inf, np.inf))
        if fraction:
            ax.set_ylim(-0.03, 1.03)
        if column == INFORMATIVENESS or column.endswith("auroc"):
            ax.axhline(0.5 if column.endswith("auroc") else 0.0, color="grey", ls="--", lw=1)
        ax.set(title=PANEL_TITLES.get(column, column.removeprefix("method/")), xlabel="training step")
        if (notes or {}).get(column):
            ax.text(0.02, 0.04, notes[column], transform=ax.transAxes, fontsize="small", color="0.3")
    for ax in axes.ravel()[len(columns):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize="large")
    _legend(fig, axes, methods, title_inches=0.45)
    return save(fig, out_dir, name)


def diagnostics(results, methods: list[str], benchmark: str, out_dir: Path) -> list[Path]:
    """The premise panels (truncation, teacher informativeness, degenerate groups), then each method's statistics
    (multiplier, gate, teacher gap and availability, …) over training."""
    metrics = with_informativeness(results.metrics[results.metrics["benchmark"] == benchmark])
    columns = diagnostic_columns(metrics)
    if not columns:
        return []
    title = f"{render.benchmark_name(benchmark)}: premises first, then method diagnostics"
    return panel_grid(metrics, columns, methods, title, out_dir, f"diagnostics_{benchmark}")


def credit(results, methods: list[str], benchmark: str, columns: list[str], out_dir: Path) -> list[Path]:
    """Credit AUROC against the training step per method (0.5: one value for every turn of an episode)."""
    metrics = results.metrics[results.metrics["benchmark"] == benchmark]
    title = f"{render.benchmark_name(benchmark)}: credit against ground truth"
    notes = {column: f"{int(metrics[episodes].sum())} eligible episodes over all runs and steps"
             for column, (episodes, _) in CREDIT_METRICS.items() if column in columns and episodes in metrics}
    return panel_grid(metrics, columns, methods, title, out_dir, f"credit_{benchmark}", ncols=2, notes=notes)


def rliable_intervals(tidy: pd.DataFrame, methods: list[str], benchmark: str, baseline: str, out_dir: Path):
    """IQM, mean and P(improvement over the baseline), each with its bootstrap 95% CI, one row per method."""
    tidy = tidy.dropna(subset=["iqm"])
    tidy = tidy[tidy["method"].isin(methods)].set_index("method").loc[[m for m in methods if m in set(tidy["method"])]]
    panels = [("iqm", "IQM success %", 100), ("mean", "mean success %", 100),
              ("prob_improvement", f"P(> {render.method_name(baseline)})", 1)]
    colors = palette(methods)
    fig, axes = plt.subplots(1, 3, figsize=(12, 0.45 * len(tidy) + 1.6), squeeze=False, sharey=True)
    y = np.arange(len(tidy))[::-1]
    for ax, (column, title, scale) in zip(axes[0], panels):
        for yi, (method, row) in zip(y, tidy.iterrows()):
            if np.isnan(row[column]):
                continue
            ax.plot([row[f"{column}_low"] * scale, row[f"{column}_high"] * scale], [yi, yi], color=colors[method], lw=6,
                    alpha=0.5, solid_capstyle="butt")
            ax.plot(row[column] * scale, yi, "|", color="black", ms=12)
        ax.set(title=title, yticks=y, yticklabels=[render.method_name(m) for m in tidy.index])
        if column == "prob_improvement":
            ax.axvline(0.5, color="grey", ls="--", lw=1)
    fig.suptitle(f"{render.benchmark_name(benchmark)}: IQM, mean: 95% intervals, bootstrap over seeds then "
                 f"episodes; P: paired by seed, Bonferroni-adjusted")
    fig.tight_layout()
    return save(fig, out_dir, f"rliable_{benchmark}")


def performance_profiles(profiles: dict, methods: list[str], benchmarks: list[str], metric: str, out_dir: Path):
    """Fraction of final-eval episodes scoring above τ (mean over seeds), with 95% bands from a bootstrap over
    seeds (rliable's score distributions, with seeds as the unit that is resampled)."""
    colors = palette(methods)
    fig, axes = plt.subplots(1, len(benchmarks), figsize=(4.8 * len(benchmarks), 3.6), squeeze=False)
    for ax, bench in zip(axes[0], benchmarks):
        for method in [m for m in methods if m in profiles.get(bench, {})]:
            taus, fraction, interval = profiles[bench][method]
            ax.plot(taus, fraction, color=colors[method], label=render.method_name(method), lw=1.6)
            ax.fill_between(taus, interval[0], interval[1], color=colors[method], alpha=0.2, lw=0)
        ax.set(title=render.benchmark_name(bench), xlabel=f"{metric} threshold τ", ylabel="fraction of episodes > τ")
    _legend(fig, axes, methods)
    return save(fig, out_dir, "performance_profiles")
