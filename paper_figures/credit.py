"""Credit scored against ground truth, per method: the table of the ``credit/*`` scores (harness/engine/credit.py).

A benchmark that labels its turns lets the engine score each method's final per-row advantages at every step:
``credit/fatal_auroc`` is how well −Ã picks out the fatal turn of a lost episode among its turns,
``credit/detour_auroc`` how well Ã ranks correct turns above harmless detours in won episodes. A method that gives
every turn of an episode one value (GRPO) scores 0.5 exactly. A run's number is its mean over the training steps
weighted by their eligible episodes; the interval is a bootstrap over seeds (``paper_figures.bootstrap``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from paper_figures import bootstrap, render

# metric logged per step -> (episodes it averages over, display name)
CREDIT_METRICS = {"credit/fatal_auroc": ("credit/fatal_episodes", "fatal-turn AUROC"),
                  "credit/fatal_auroc_position": ("credit/fatal_episodes", "position alone"),
                  "credit/fatal_share": ("credit/fatal_share_episodes", "fatal share of blame"),
                  "credit/neutral_share": ("credit/neutral_episodes", "neutral share of credit"),
                  "credit/detour_auroc": ("credit/detour_episodes", "detour AUROC")}
CAPTION = ("Credit against ground truth (docs/credit.md): AUROC of the per-turn advantage for the fatal turn of lost "
           "episodes (0.5 = one value for every turn of an episode, as GRPO), beside what position alone scores on "
           "the same episodes (a later turn blamed more); the share of a lost episode's negative advantage its fatal "
           "turn gets (oracle 1); the share of the advantage mass turns that could not change the outcome get "
           "(oracle 0); correct turns over detours in won episodes. A run's mean over the eligible episodes of its "
           "training steps, mean over seeds with a 95% interval from a bootstrap over seeds")
RUN_KEYS = ["benchmark", "method", "seed"]


def present(metrics: pd.DataFrame) -> list[str]:
    return [c for c in CREDIT_METRICS if c in metrics.columns and metrics[c].notna().any()]


def run_credit(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per run: each credit metric averaged over the eligible episodes of all its training steps (a step's
    mean weighted by its episode count; a log without counts weighs each step with a score once). NaN: no eligible
    episode in the run."""
    out = metrics[RUN_KEYS].drop_duplicates().reset_index(drop=True)
    for metric, (episodes, _) in CREDIT_METRICS.items():
        if metric not in metrics.columns:
            out[metric] = np.nan
            continue
        weight = metrics[episodes].fillna(0.0) if episodes in metrics.columns else metrics[metric].notna() * 1.0
        frame = metrics[RUN_KEYS].assign(weighted=metrics[metric].fillna(0.0) * weight, weight=weight)
        sums = frame.groupby(RUN_KEYS, as_index=False, sort=False)[["weighted", "weight"]].sum()
        sums[metric] = (sums["weighted"] / sums["weight"]).where(sums["weight"] > 0)
        out = out.merge(sums[[*RUN_KEYS, metric]], on=RUN_KEYS, how="left")
    return out


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
            cell = render.fmt_interval(point, low, high, digits=3, scale=1.0)
            # a run without an eligible episode (no detour in any won episode) has no score: count who has one
            line[CREDIT_METRICS[column][1]] = render.fmt_seeds(cell, int(of_method[column].notna().sum()),
                                                               len(of_method))
        line["Seeds"] = row["n_seeds"]
        tidy.append(row)
        display.append(line)
    return pd.DataFrame(tidy), pd.DataFrame(display)

