"""Premise and credit outputs on stand-in runs: the premise table and its flags, the "teacher uninformative" mark
in the tables, the diagnostics figure's panel order, and the credit table."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from workflow_fixtures.premise_runs import write_premise_grid

from paper_figures import plots, premise
from paper_figures.build import build
from paper_figures.load import load_runs


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("premise")
    write_premise_grid(root / "runs")
    build(root / "runs", root / "out", reps=200)
    return root


def test_premise_table_flags_the_uninformative_truncated_teacher(built: Path):
    table = pd.read_csv(built / "out" / "tables" / "premise_gates.csv").set_index("method")
    assert table.loc["sharpo", "n_uninformative"] == 3 and table.loc["sharpo", "n_judged"] == 3
    assert "teacher uninformative (3/3 runs)" in table.loc["sharpo", "flags"]
    assert "teacher context truncated (100% of rows)" in table.loc["sharpo", "flags"]
    assert table.loc["stepopsd", "n_uninformative"] == 0 and pd.isna(table.loc["stepopsd", "flags"])
    assert np.isnan(table.loc["grpo", "teacher/gap_success"])  # no teacher: nothing to judge
    markdown = (built / "out" / "tables" / "premise_gates.md").read_text()
    assert "| StepOPSD | 3 | 0% | +0.43 |" in markdown


def test_every_results_table_marks_the_uninformative_teacher(built: Path):
    for name in ("main", "rliable_gates"):
        lines = (built / "out" / "tables" / f"{name}.md").read_text().splitlines()
        assert "Premise" in lines[2]
        sharpo = next(line for line in lines if line.startswith("| SHARPO"))
        assert "teacher uninformative" in sharpo
        assert "teacher uninformative" not in next(line for line in lines if line.startswith("| StepOPSD"))


def test_a_run_is_judged_on_its_own_means():
    metrics = pd.DataFrame({"benchmark": "gates", "method": "rlsd", "seed": [0, 0, 1, 1],
                            "teacher/gap_success": [0.5, 0.1, -0.2, -0.1], "teacher/gap_failure": [0.0, 0.0, 0.0, 0.0]})
    runs = premise.run_premises(metrics).set_index("seed")
    assert runs.loc[0, "uninformative"] == 0 and runs.loc[1, "uninformative"] == 1
    table = premise.method_premises(premise.run_premises(metrics))
    assert table.loc[0, "flags"] == "teacher uninformative in 1/2 runs"  # the method: 0.075 on wins, 0 on losses


def test_degenerate_groups_warn_above_the_threshold():
    metrics = pd.DataFrame({"benchmark": "gates", "method": "grpo", "seed": 0, "degenerate_group_frac": [0.95, 0.97],
                            "method/zero_adv_frac": [0.5, 0.5]})
    assert premise.notes(metrics) == {("gates", "grpo"): "single-outcome groups 96% > 90%"}


def test_diagnostics_lead_with_the_premise_panels(built: Path):
    metrics = plots.with_informativeness(load_runs(built / "runs").metrics)
    columns = plots.diagnostic_columns(metrics)
    assert columns[:5] == ["teacher/truncated_frac", plots.INFORMATIVENESS, "teacher/better_frac",
                           "degenerate_group_frac", "method/zero_adv_frac"]
    assert "credit/fatal_auroc" not in columns  # credit has its own figure
    assert plots.is_fraction("teacher/truncated_frac") and not plots.is_fraction("teacher/gap_success")


def test_fraction_bands_stay_inside_zero_one():
    import matplotlib.pyplot as plt

    band = pd.DataFrame({"method": "a", "step": [1, 2], "mean": [0.95, 0.05], "half": [0.3, 0.3], "n": 2})
    fig, ax = plt.subplots()
    plots.draw_bands(ax, band, "step", {"a": "C0"}, limits=(0, 1))
    edges = ax.collections[0].get_paths()[0].vertices[:, 1]
    plt.close(fig)
    assert edges.min() >= 0 and edges.max() <= 1


def test_figure_title_clears_the_panel_titles(built: Path, monkeypatch):
    import matplotlib.pyplot as plt

    saved = []
    monkeypatch.setattr(plots, "save", lambda fig, out_dir, name: saved.append(fig) or [])
    plots.diagnostics(load_runs(built / "runs"), ["grpo", "stepopsd", "sharpo"], "gates", built)
    fig = saved[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    title_bottom = fig._suptitle.get_window_extent(renderer).y0
    panel_tops = [ax.title.get_window_extent(renderer).y1 for ax in fig.axes if ax.get_visible()]
    plt.close(fig)
    assert title_bottom > max(panel_tops)


def test_credit_table_and_figure(built: Path):
    table = pd.read_csv(built / "out" / "tables" / "credit_gates.csv").set_index("method")
    assert table.loc["grpo", "fatal_auroc"] == 0.5 and table.loc["grpo", "fatal_auroc_low"] == 0.5
    assert table.loc["stepopsd", "fatal_auroc_low"] > 0.5 and table.loc["stepopsd", "n_seeds"] == 3
    assert table.loc["sharpo", "detour_auroc"] == pytest.approx(0.6)  # NaN steps (no eligible episode) skipped
    assert (built / "out" / "figures" / "credit_gates.png").stat().st_size > 1000
