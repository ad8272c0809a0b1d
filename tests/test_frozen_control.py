"""The frozen control: the grid adds one lr-0 run per seed, the engine names its folder `frozen`, and the
gain table pairs each method with it by seed."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats
from workflow_fixtures.synthetic_runs import write_run

from harness.config import load_config
from harness.grid.runs import FROZEN, load_grid
from paper_figures import control, tables
from paper_figures.load import load_runs

REPO = Path(__file__).resolve().parents[1]


def test_default_profile_grid_has_a_frozen_run_per_seed():
    grid = load_grid("cpu", REPO / "config")
    frozen = [r for r in grid.runs if r.label == FROZEN]
    seeds = sorted({r.seed for r in grid.runs})
    assert len(seeds) >= 5 and sorted(r.seed for r in frozen) == seeds
    assert {r.benchmark for r in grid.runs} == {"gates"}
    cfg = load_config(grid.profile_path, [o.strip("'") for o in frozen[0].overrides()])
    assert cfg.train.lr == 0.0 and cfg.method_label == FROZEN and cfg.run_dir.parts[-2] == FROZEN
    method_runs = [r for r in grid.runs if r.label != FROZEN]
    assert {r.label for r in method_runs} >= {"grpo", "rlsd", "sharpo", "oracle_fatal", "oracle_decisive"}
    assert load_config(grid.profile_path, [o.strip("'") for o in method_runs[0].overrides()]).method_label != FROZEN


def outcomes(successes: int, n_tasks: int = 20) -> np.ndarray:
    return np.array([1] * successes + [0] * (n_tasks - successes))


def test_gain_table_pairs_by_seed(tmp_path):
    runs = tmp_path / "runs"
    frozen, grpo, flat = [4, 6, 5], [10, 14, 9], [4, 6, 6]
    for seed in range(3):
        write_run(runs, "gates", FROZEN, seed, 0.3, outcomes=outcomes(frozen[seed]), n_tasks=20)
        write_run(runs, "gates", "grpo", seed, 0.6, outcomes=outcomes(grpo[seed]), n_tasks=20)
        write_run(runs, "gates", "sharpo", seed, 0.3, outcomes=outcomes(flat[seed]), n_tasks=20)
    results = load_runs(runs)
    ctx = tables.Context(expected=results.runs[["benchmark", "method", "seed"]], reference=tables.load_reference())
    tidy, display = control.control_table(results, ctx)
    assert FROZEN not in set(tidy["method"])
    row = tidy.set_index("method").loc["grpo"]
    diffs = (np.array(grpo) - np.array(frozen)) / 20
    half = scipy_stats.t.ppf(0.975, 2) * diffs.std(ddof=1) / np.sqrt(3)
    assert row["gain_pct"] == pytest.approx(diffs.mean() * 100) and row["ci95_pct"] == pytest.approx(half * 100)
    assert row["learns"] and not tidy.set_index("method").loc["sharpo", "learns"]
    assert list(display.columns)[:2] == ["Method", "Gates: gain over frozen (points)"]


def test_no_frozen_run_no_table(tmp_path):
    write_run(tmp_path / "runs", "gates", "grpo", 0, 0.5)
    results = load_runs(tmp_path / "runs")
    ctx = tables.Context(expected=results.runs[["benchmark", "method", "seed"]], reference=tables.load_reference())
    assert control.control_table(results, ctx) is None
