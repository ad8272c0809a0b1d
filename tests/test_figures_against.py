"""The reproduction verdict: a grid compared with the published one, per method, within the intervals."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from workflow_fixtures.synthetic_runs import write_run

from harness.config import load_config
from harness.grid.runs import load_grid
from paper_figures import against, render
from paper_figures.__main__ import main

PUBLISHED = Path(__file__).resolve().parents[1] / "docs" / "results" / "cpu"


@pytest.fixture
def published() -> pd.DataFrame:
    return against.read_published(PUBLISHED)[0]


def test_the_published_tables_ship_with_their_settings(published: pd.DataFrame):
    _, info = against.read_published(PUBLISHED)
    profile = load_config(Path(__file__).resolve().parents[1] / "config" / "cpu.yaml")  # published = the default
    assert info["commit"] and info["config"]["train"]["lr"] == profile.train.lr
    assert info["overrides"]["frozen"]["train.lr"] == 0
    means = published.groupby("method")["success"].mean() * 100
    shown = {}  # the means main.md (and README.md) show, by display name: "| GRPO | 76.9 ± 4.6 | — |"
    for line in (PUBLISHED / "main.md").read_text().splitlines()[4:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        shown[cells[0]] = float(cells[1].split()[0])
    assert len(shown) == published["method"].nunique() == len(load_grid("cpu").method_labels)  # the grid's arms
    for method, mean in means.items():
        assert shown[render.method_name(method)] == pytest.approx(round(mean, 1)), method


def test_the_same_numbers_are_identical(published: pd.DataFrame):
    table = against.compare(published.copy(), published)
    assert set(table["verdict"]) == {against.IDENTICAL}


def test_some_seeds_rerun_to_rounding_are_identical(published: pd.DataFrame):
    # the AVX2 check: every run a few 1e-7 off the published exact success (float32 sums), here seeds 0-1 only
    ours = published[published["seed"] < 2].copy()
    ours["success"] += np.where(ours["seed"] == 0, 5.1e-7, -1e-7)
    table = against.compare(ours, published).set_index("method")
    assert set(table["verdict"]) == {against.IDENTICAL}
    shown = published[published["seed"] < 2].groupby("method")["success"].mean() * 100
    assert table["success_published"].to_dict() == pytest.approx(shown.to_dict())  # the same seeds' mean
    ours.loc[ours.index[0], "success"] += 0.004  # another path: 0.4 points is no rounding
    assert against.compare(ours, published).set_index("method").loc[ours.iloc[0]["method"], "verdict"] != (
        against.IDENTICAL)


def test_other_seeds_with_the_same_statistics_agree(published: pd.DataFrame):
    ours = published.copy()
    # another machine: every seed lands elsewhere, the spread stays (a permutation of the seeds, ±1.5 points)
    rng = np.random.default_rng(0)
    ours["success"] = ours.groupby("method")["success"].transform(lambda s: rng.permutation(s.to_numpy()))
    # ±1.5 points, both signs within every arm (an arm whose seeds all shift one way has moved)
    sign = np.where(ours.groupby("method").cumcount() % 2 == 0, 1.0, -1.0)
    ours["success"] = (ours["success"] + 0.015 * sign).clip(0, 1)
    table = against.compare(ours, published).set_index("method")
    assert set(table["verdict"]) == {against.AGREES}
    assert (table["diff_low"] < 0).all() and (table["diff_high"] > 0).all()


def test_a_grid_shifted_beyond_the_intervals_differs(published: pd.DataFrame):
    ours = published.copy()
    arm = "grpo_compute_matched"  # one published arm, 25 points lower on every seed
    shifted = ours["method"] == arm
    ours.loc[shifted, "success"] -= 0.25  # 25 points lower on every seed
    table = against.compare(ours, published).set_index("method")
    assert table.loc[arm, "verdict"] == against.DIFFERS and table.loc[arm, "diff_high"] < 0
    assert (table.drop(arm)["verdict"] == against.IDENTICAL).all()
    assert against.failed(table.reset_index())


def test_intervals_hold_together_over_the_methods(published: pd.DataFrame):
    assert against.family_confidence(7) == pytest.approx(1 - 0.05 / 7)
    table = against.compare(published.copy(), published)
    assert table["confidence"].eq(against.family_confidence(published["method"].nunique())).all()


def test_welch_interval_on_known_numbers():
    diff, low, high = against.welch_interval(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0]))
    # se = √(2/3), dof = 4, t_{0.975,4} = 2.776445
    assert diff == 0 and high == pytest.approx(2.776445 * np.sqrt(2 / 3), rel=1e-5) and low == -high


def test_changed_settings_are_not_compared(published: pd.DataFrame):
    _, info = against.read_published(PUBLISHED)
    config = json.loads(json.dumps(info["config"]))
    assert against.setting_differences(config, info, "grpo") == []
    config["train"]["lr"] = 3e-4
    lr = info["config"]["train"]["lr"]
    assert against.setting_differences(config, info, "grpo") == [f"train.lr: 0.0003 (published {lr})"]
    config["train"]["lr"] = 0.0  # the frozen control's own override
    assert against.setting_differences(config, info, "frozen") == []


def test_command_prints_a_verdict_per_method(tmp_path: Path, capsys):
    folder = tmp_path / "published"
    folder.mkdir()
    runs = tmp_path / "runs"
    rows = []
    for method, p in (("grpo", 0.6), ("sharpo", 0.6)):
        for seed in range(3):
            write_run(runs, "gates", method, seed, p, n_tasks=40)
            rows.append({"benchmark": "gates", "method": method, "seed": seed, "steps": 4, "success": p})
    rows[-1]["success"] = 0.62  # published SHARPO: 0.60, 0.60, 0.62 (a spread to judge by)
    pd.DataFrame(rows).to_csv(folder / "runs.csv", index=False)
    code = main(["--runs", str(runs), "--against", str(folder)])
    out = capsys.readouterr().out
    assert "GRPO" in out and "SHARPO" in out and "published" in out
    assert out.count(against.DIFFERS) + out.count(against.AGREES) + out.count(against.TOO_FEW) >= 2
    assert code == (1 if against.DIFFERS in out else 0)


def test_package_versions_that_differ_are_named():
    protocols = [{"versions": {"torch": "2.13.0+cpu", "transformers": "5.25.0"}},
                 {"versions": {"torch": "2.13.0+cpu", "transformers": "5.26.1"}}]
    published = {"torch": "2.13.0+cpu", "transformers": "5.25.0", "vllm": None}
    assert against.version_differences(protocols, published) == ["transformers 5.25.0, 5.26.1 (published 5.25.0)"]
    assert against.version_differences(protocols[:1], published) == []
