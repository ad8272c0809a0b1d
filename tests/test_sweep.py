"""A grid that sweeps a setting (grid.settings): one run identity per setting, and the sweep's table and figure from
a stand-in runs folder."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from workflow_fixtures.synthetic_runs import write_run

from harness.config import load_config
from harness.core.typed import ConfigError
from harness.grid.runs import load_grid, setting_label, split_setting_label
from paper_figures.load import load_runs
from paper_figures.sweep import build_sweep, sweep_frame

REPO = Path(__file__).resolve().parents[1]
HORIZONS = (4, 8, 16)


def sweep_profile(tmp_path: Path, methods=("grpo", "sharpo"), settings=None, **grid) -> Path:
    path = tmp_path / "sweep_test.yaml"
    settings = settings if settings is not None else [{"gates.horizon": h} for h in HORIZONS]
    path.write_text(yaml.safe_dump({"profile": "sweep_test", "output_dir": str(tmp_path / "runs"), "grid": {
        "seeds": [0, 1, 2], "benchmarks": ["gates"], "methods": list(methods), "settings": settings, **grid}}))
    return path


def test_each_setting_is_a_run_of_its_own(tmp_path):
    grid = load_grid(str(sweep_profile(tmp_path, frozen_control=True)))
    assert len(grid.runs) == 3 * 3 * 3  # (2 methods + frozen) × 3 horizons × 3 seeds
    assert len({run.key for run in grid.runs}) == len(grid.runs)
    run = grid.run("gates/sharpo@horizon8/seed1")
    assert run.override_items() == ["benchmark=gates", "method=sharpo", "seed=1", "gates.horizon=8",
                                    "run_label=sharpo@horizon8"]
    frozen = grid.run("gates/frozen@horizon16/seed0").override_items()
    assert "gates.horizon=16" in frozen and "train.lr=0.0" in frozen and "run_label=frozen@horizon16" in frozen
    assert grid.settings == ((("gates.horizon", 4),), (("gates.horizon", 8),), (("gates.horizon", 16),))
    assert split_setting_label(setting_label("grpo", (("gates.horizon", 8),))) == ("grpo", "horizon8")


@pytest.mark.parametrize("settings, match", [([{"seed": 3}], "set by the grid"), ([{}], "mapping"),
                                             (["gates.horizon=8"], "mapping")])
def test_a_bad_setting_is_refused(tmp_path, settings, match):
    with pytest.raises(ConfigError, match=match):
        load_grid(str(sweep_profile(tmp_path, settings=settings)))


def test_the_sweep_profile_varies_the_horizon_alone():
    grid = load_grid("sweep", REPO / "config")
    assert {run.method_name for run in grid.runs} >= {"grpo", "gigpo", "sharpo", "rlsd", "agentopsd"}
    assert sorted({run.seed for run in grid.runs}) == [0, 1, 2]
    assert grid.settings == tuple(((("gates.horizon", h),)) for h in HORIZONS)
    configs = {h: load_config(grid.profile_path, grid.run(f"gates/grpo@horizon{h}/seed0").override_items())
               for h in HORIZONS}
    assert {h: cfg.benchmark_options.horizon for h, cfg in configs.items()} == {h: h for h in HORIZONS}
    assert len({(cfg.benchmark_options.pivots, cfg.benchmark_options.key_at_gates) for cfg in configs.values()}) == 1
    assert len({cfg.run_dir for cfg in configs.values()}) == 3


def stand_in_runs(tmp_path: Path) -> Path:
    """GRPO at 0.5 credit (one value per episode); SHARPO's fatal AUROC known per run; one SHARPO run missing."""
    runs = tmp_path / "runs"
    for h in HORIZONS:
        for seed in range(3):
            for method, fatal in (("grpo", 0.5), ("sharpo", 0.6 + 0.01 * seed + 0.1 * (h == 4))):
                if (method, h, seed) == ("sharpo", 16, 2):
                    continue
                run_dir = write_run(runs, "gates", f"{method}@horizon{h}", seed, 0.9 - 0.02 * h, steps=4)
                metrics = pd.read_csv(run_dir / "metrics.csv")
                # step 1 has no eligible episode (NaN, 0 episodes); steps 2-4 weigh 1, 1, 2 episodes
                metrics["credit/fatal_auroc"] = [np.nan, fatal - 0.1, fatal - 0.1, fatal + 0.1]
                metrics["credit/fatal_episodes"] = [0, 1, 1, 2]
                metrics["credit/detour_auroc"] = 0.5
                metrics["credit/detour_episodes"] = 3
                metrics.to_csv(run_dir / "metrics.csv", index=False)
    return runs


def test_sweep_frame_reads_success_and_episode_weighted_credit(tmp_path):
    grid = load_grid(str(sweep_profile(tmp_path)))
    runs = stand_in_runs(tmp_path)
    frame, axis = sweep_frame(load_runs(runs), grid)
    assert axis == "gates.horizon" and len(frame) == 17
    row = frame[(frame["method"] == "sharpo") & (frame["x"] == 4) & (frame["seed"] == 1)].iloc[0]
    assert row["fatal_auroc"] == pytest.approx(0.71)  # (0.61·1 + 0.61·1 + 0.81·2) / 4
    assert np.allclose(frame.loc[frame["method"] == "grpo", "fatal_auroc"], 0.5)
    final = load_runs(runs).runs.set_index(["method", "seed"])["success"]
    assert row["success"] == final[("sharpo@horizon4", 1)]


def test_sweep_table_and_figure_are_written(tmp_path):
    profile = sweep_profile(tmp_path)
    paths = build_sweep(stand_in_runs(tmp_path), tmp_path / "out", str(profile))
    assert {p.name for p in paths} == {"sweep.csv", "sweep.md", "sweep.tex", "sweep.png", "sweep.pdf"}
    assert all(p.stat().st_size > 0 for p in paths)
    tidy = pd.read_csv(tmp_path / "out" / "tables" / "sweep.csv")
    cell = tidy[(tidy["method"] == "sharpo") & (tidy["x"] == 16) & (tidy["score"] == "fatal_auroc")].iloc[0]
    assert cell["n"] == 2 and cell["mean"] == pytest.approx(0.605)  # seeds 0 and 1: 0.60 and 0.61
    grpo = tidy[(tidy["method"] == "grpo") & (tidy["score"] == "fatal_auroc")]
    assert np.allclose(grpo["mean"], 0.5) and (grpo["half"].abs() < 1e-9).all()
    markdown = (tmp_path / "out" / "tables" / "sweep.md").read_text()
    assert "gates.horizon" in markdown and "0.605" in markdown


def test_a_sweep_without_runs_is_an_error(tmp_path):
    (tmp_path / "runs").mkdir()
    with pytest.raises(FileNotFoundError, match="no finished run"):
        build_sweep(tmp_path / "runs", tmp_path / "out", str(sweep_profile(tmp_path)))
