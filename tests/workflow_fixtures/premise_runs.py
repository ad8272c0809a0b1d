"""Stand-in run folders with the premise and credit metrics the engine logs per step (teacher/*, credit/*,
degenerate_group_frac, method/zero_adv_frac), on top of ``synthetic_runs.write_run``."""
from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pandas as pd
from workflow_fixtures.synthetic_runs import write_run

# method → (gap on wins, gap on losses, truncated share, fatal AUROC); None gaps: no teacher
PROFILES = {
    "grpo": (None, None, None, 0.5),
    "sharpo": (-1.2, -0.6, 1.0, 0.52),  # a truncated teacher that knows less on wins than on losses
    "stepopsd": (0.4, -0.3, 0.0, 0.71),  # a teacher that fits and informs
}


def write_premise_run(root: Path, benchmark: str, method: str, seed: int, p_success: float, steps: int = 12,
                      **kwargs) -> Path:
    run_dir = write_run(root, benchmark, method, seed, p_success, steps=steps, **kwargs)
    rng = np.random.default_rng(zlib.crc32(f"premise/{method}/{seed}".encode()))
    metrics = pd.read_csv(run_dir / "metrics.csv")
    gap_success, gap_failure, truncated, fatal = PROFILES[method.split("-")[0]]
    n = len(metrics)
    metrics["degenerate_group_frac"] = np.clip(0.3 + rng.normal(0, 0.05, n), 0, 1)
    metrics["method/zero_adv_frac"] = metrics["degenerate_group_frac"]
    if gap_success is not None:
        metrics["teacher/gap_success"] = gap_success + rng.normal(0, 0.1, n)
        metrics["teacher/gap_failure"] = gap_failure + rng.normal(0, 0.1, n)
        metrics["teacher/better_frac"] = np.clip(0.5 + gap_success / 2 + rng.normal(0, 0.05, n), 0, 1)
        metrics["teacher/truncated_frac"] = truncated
        metrics["teacher/available_frac"] = 0.9
    metrics["credit/fatal_auroc"] = fatal if fatal == 0.5 else np.clip(fatal + rng.normal(0, 0.08, n), 0, 1)
    metrics["credit/detour_auroc"] = np.where(np.arange(n) % 4 == 0, np.nan, 0.5 if fatal == 0.5 else 0.6)
    metrics.to_csv(run_dir / "metrics.csv", index=False)
    return run_dir


def write_premise_grid(root: Path, seeds=(0, 1, 2)) -> Path:
    for method, p in (("grpo", 0.7), ("sharpo", 0.7), ("stepopsd", 0.8)):
        for seed in seeds:
            write_premise_run(root, "gates", method, seed, p, n_tasks=40)
    return root
