"""Credit scored against ground truth, per method: the table of ``credit/fatal_auroc`` and ``credit/detour_auroc``.

A benchmark that labels its turns lets the engine score each method's final per-row advantages at every step:
``credit/fatal_auroc`` is how well −Ã picks out the fatal turn of a lost episode among its turns,
``credit/detour_auroc`` how well Ã ranks correct turns above harmless detours in won episodes. A method that gives
every turn of an episode one value (GRPO) scores 0.5 exactly. A run's number is its mean over the training steps
that had an eligible episode; the interval is a bootstrap over seeds (``paper_figures.bootstrap``).
"""
from __future__ import annotations

import pandas as pd

from paper_figures import bootstrap, render

CREDIT_METRICS = {"credit/fatal_auroc": "fatal-turn AUROC", "credit/detour_auroc": "detour AUROC"}
CAPTION = ("Credit against ground truth: AUROC of the method's per-turn advantage for the fatal turn of lost episodes "
           "and for correct turns over detours in won ones (0.5 = one value for every turn of an episode, as GRPO); "
           "a run's mean over training steps, mean over seeds with a 95% interval from a bootstrap over seeds")


def present(metrics: pd.DataFrame) -> list[str]:
    return [c for c in CREDIT_METRICS if c in metrics.columns and metrics[c].notna().any()]


def run_credit(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per run: the mean over steps of each credit metric (NaN steps, with no eligible episode, skipped)."""
    columns = present(metrics)
    return metrics.groupby(["benchmark", "method", "seed"], sort=False)[columns].mean().reset_index()


def credit_table(results, methods: list[str], benchmark: str, reps: int = 2000, seed: int = 0):
    """(tidy, display) per method (in the order of ``methods``), or None when no run of the benchmark logged a
    credit metric."""
    metrics = results.metrics[results.metrics["benchmark"] == benchmark]
    columns = present(metrics)
    if not columns:
        return None
    runs = run_credit(metrics)
    tidy, display = [], []
    for method in methods:
        of_method = runs[runs["method"] == method]
        line = {"Method": render.method_name(method)}
        row = {"benchmark": benchmark, "method": method, "n_seeds": int(of_method[columns].notna().any(axis=1).sum())}
        for column in columns:
            point, low, high = bootstrap.seed_interval(of_method[column], reps, seed, f"{method}/{column}",
                                                       (0.0, 1.0))
            name = column.removeprefix("credit/")
            row.update({name: point, f"{name}_low": low, f"{name}_high": high})
            line[CREDIT_METRICS[column]] = render.fmt_interval(point, low, high, digits=3, scale=1.0)
        line["Seeds"] = row["n_seeds"]
        tidy.append(row)
        display.append(line)
    return pd.DataFrame(tidy), pd.DataFrame(display)

