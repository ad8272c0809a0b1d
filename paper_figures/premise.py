"""Whether each method got the signal it rests on, from the per-step metrics every run logs.

GRPO needs groups with mixed outcomes (``degenerate_group_frac``, ``method/zero_adv_frac``); a teacher method needs
its privileged context to fit (``teacher/truncated_frac``) and a teacher that knows more on the rollouts that won
than on those that lost: the mean per-token gap δ = log π_T − log π_S over rows of successful rollouts
(``teacher/gap_success``) above the gap over failed ones (``teacher/gap_failure``). A run whose mean gap_success
is not above its mean gap_failure is "teacher uninformative": the method is then GRPO rescaled by a factor that does
not depend on which turn mattered, and the tables say so beside its numbers.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from paper_figures import render

# (metric, older name the engine logged before it had teacher/ metrics, table title, kind)
PREMISE_METRICS = [
    ("teacher/truncated_frac", "method/teacher_truncated_frac", "teacher rows truncated", "frac"),
    ("teacher/gap_success", None, "gap δ on wins (nats/token)", "gap"),
    ("teacher/gap_failure", None, "gap δ on losses (nats/token)", "gap"),
    ("teacher/better_frac", None, "rows with δ > 0", "frac"),
    ("degenerate_group_frac", None, "single-outcome groups", "frac"),
    ("method/zero_adv_frac", None, "rows with A = 0", "frac"),
]
DEGENERATE_WARNING = 0.9  # above this share of single-outcome groups (or zero advantages) the method has little left
UNINFORMATIVE = "teacher uninformative"


def _column(metrics: pd.DataFrame, name: str, fallback: str | None) -> pd.Series:
    if name in metrics.columns and metrics[name].notna().any():
        return metrics[name].astype(float)
    if fallback and fallback in metrics.columns:
        return metrics[fallback].astype(float)
    return pd.Series(np.nan, index=metrics.index)


def run_premises(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per run (benchmark, method, seed): the mean over training steps of every premise metric, and
    ``uninformative`` (True/False; NaN when the run logged no teacher gaps)."""
    keys = ["benchmark", "method", "seed"]
    columns = [name for name, *_ in PREMISE_METRICS]
    if metrics.empty:
        return pd.DataFrame(columns=[*keys, *columns, "uninformative"])
    frame = metrics[keys].copy()
    for name, fallback, *_ in PREMISE_METRICS:
        frame[name] = _column(metrics, name, fallback)
    runs = frame.groupby(keys, sort=False)[columns].mean().reset_index()
    gaps = runs[["teacher/gap_success", "teacher/gap_failure"]]
    runs["uninformative"] = np.where(gaps.notna().all(axis=1),
                                     runs["teacher/gap_success"] <= runs["teacher/gap_failure"], np.nan)
    return runs


def method_premises(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (benchmark, method): means over runs, the count of uninformative runs, and the flags."""
    rows = []
    for (bench, method), group in runs.groupby(["benchmark", "method"], sort=False):
        row = {"benchmark": bench, "method": method, "n_runs": len(group)}
        row.update({name: group[name].mean() for name, *_ in PREMISE_METRICS})
        judged = group["uninformative"].dropna()
        row["n_uninformative"], row["n_judged"] = int(judged.astype(bool).sum()), len(judged)
        row["flags"] = "; ".join(flags(row))
        rows.append(row)
    return pd.DataFrame(rows)


def flags(row: dict) -> list[str]:
    """The warnings of one method's premise row (the design's premise table)."""
    out = []
    success, failure = row["teacher/gap_success"], row["teacher/gap_failure"]
    if np.isfinite(success) and np.isfinite(failure) and success <= failure:
        out.append(f"{UNINFORMATIVE} ({row['n_uninformative']}/{row['n_judged']} runs)")
    elif row.get("n_uninformative"):
        out.append(f"{UNINFORMATIVE} in {row['n_uninformative']}/{row['n_judged']} runs")
    truncated = row["teacher/truncated_frac"]
    if np.isfinite(truncated) and truncated > 0:
        out.append(f"teacher context truncated ({truncated:.0%} of rows)")
    for name, what in (("degenerate_group_frac", "single-outcome groups"), ("method/zero_adv_frac", "zero advantages")):
        if np.isfinite(row[name]) and row[name] > DEGENERATE_WARNING:
            out.append(f"{what} {row[name]:.0%} > {DEGENERATE_WARNING:.0%}")
    return out


def notes(metrics: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(benchmark, method label) → its flags, for the marks beside the numbers in every table."""
    table = method_premises(run_premises(metrics))
    if table.empty:
        return {}
    return {(r.benchmark, r.method): r.flags for r in table.itertuples(index=False) if r.flags}


def add_notes(display: pd.DataFrame, labels: list[str], benchmarks: list[str], marks: dict) -> pd.DataFrame:
    """Add a "Premise" column to a display table whose rows are ``labels``, when any of them carries a flag."""
    cells = []
    for label in labels:
        found = [(b, marks[(b, label)]) for b in benchmarks if marks.get((b, label))]
        many = len(benchmarks) > 1
        cells.append("; ".join(f"{render.benchmark_name(b)}: {text}" if many else text for b, text in found))
    if not any(cells):
        return display
    return display.assign(Premise=[cell or "" for cell in cells])


def _fmt(value: float, kind: str) -> str:
    if not np.isfinite(value):
        return render.MISSING
    return f"{value:.0%}" if kind == "frac" else f"{value:+.2f}"


def premise_table(results, methods: list[str], benchmark: str):
    """Per method (in the order of ``methods``): the premise metrics (means over steps, then over runs) and their
    warning flags; None when no run logged any of them."""
    metrics = results.metrics[results.metrics["benchmark"] == benchmark]
    table = method_premises(run_premises(metrics))
    present = [name for name, *_ in PREMISE_METRICS if not table.empty and table[name].notna().any()]
    if not present:
        return None
    by_method = table.set_index("method")
    display = []
    for method in [m for m in methods if m in by_method.index]:
        row = by_method.loc[method]
        line = {"Method": render.method_name(method), "Runs": int(row["n_runs"])}
        line.update({title: _fmt(row[name], kind) for name, _, title, kind in PREMISE_METRICS if name in present})
        line["Warnings"] = row["flags"] or "none"
        display.append(line)
    return table, pd.DataFrame(display)
