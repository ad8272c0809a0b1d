"""paper_figures on synthetic run folders: the numbers in the tables, missing runs marked, every format written."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from workflow_fixtures.synthetic_runs import write_run

from paper_figures import render
from paper_figures.build import build
from paper_figures.load import load_runs

FIXTURES = Path(__file__).parent / "workflow_fixtures"


def outcomes(successes: int, n_tasks: int = 12) -> np.ndarray:
    return np.array([1] * successes + [0] * (n_tasks - successes))


@pytest.fixture
def partial_grid(tmp_path: Path) -> Path:
    """grid4.yaml asks for grpo and sharpo × seeds 0, 1 on ALFWorld; sharpo seed 1 never finished."""
    runs = tmp_path / "runs"
    write_run(runs, "alfworld", "grpo", 0, 0.5, outcomes=outcomes(6))
    write_run(runs, "alfworld", "grpo", 1, 0.5, outcomes=outcomes(3))
    write_run(runs, "alfworld", "sharpo", 0, 0.9, outcomes=outcomes(12))
    unfinished = write_run(runs, "alfworld", "sharpo", 1, 0.9)
    (unfinished / "done.json").unlink()  # killed mid-run: no done.json
    return runs


def test_unfinished_runs_are_left_out(partial_grid: Path):
    results = load_runs(partial_grid)
    assert sorted(zip(results.runs["method"], results.runs["seed"])) == [("grpo", 0), ("grpo", 1), ("sharpo", 0)]
    assert results.final_episodes.groupby(["method", "seed"]).size().eq(12).all()


def test_tables_hold_the_runs_numbers_and_mark_missing(partial_grid: Path, tmp_path: Path):
    out = tmp_path / "out"
    paths = build(partial_grid, out, profile=str(FIXTURES / "grid4.yaml"), reps=50)
    main = pd.read_csv(out / "tables" / "main.csv")
    grpo = main[(main["benchmark"] == "alfworld") & (main["method"] == "grpo")].iloc[0]
    # seeds 50% and 25%: mean 37.5, t_{0.975,1} = 12.7062 · s/√2 with s = 17.678 → 158.8
    assert grpo["success_pct"] == pytest.approx(37.5)
    assert grpo["ci95_pct"] == pytest.approx(12.7062047 * 0.25 / math.sqrt(2) * 100 / math.sqrt(2), rel=1e-6)
    assert grpo["paper_success_pct"] == pytest.approx(70.57) and grpo["paper_plus_minus"] == pytest.approx(7.83)
    markdown = (out / "tables" / "main.md").read_text()
    assert "| SHARPO | 100.0 (1/2) | 84.90 ± 1.19 |" in markdown  # one seed of two: no CI, marked
    assert "| SHARPO (λ=0.2) | — | 84.38 |" in markdown  # the paper's row we did not run
    tex = (out / "tables" / "main.tex").read_text()
    assert "\\toprule" in tex and "\\bottomrule" in tex and "$\\pm$" in tex and "--" in tex
    missing = pd.read_csv(out / "tables" / "missing_runs.csv")
    assert missing.to_dict("records") == [{"benchmark": "alfworld", "method": "sharpo", "seed": 1}]
    for name in ["main", "task_types_alfworld", "rliable_alfworld", "cost"]:
        for ext in ["csv", "md", "tex"]:
            assert out / "tables" / f"{name}.{ext}" in paths
    for name in ["learning_curves", "diagnostics_alfworld", "rliable_alfworld", "performance_profiles"]:
        for ext in ["png", "pdf"]:
            assert (out / "figures" / f"{name}.{ext}").stat().st_size > 1000


def test_rliable_table_on_known_scores(partial_grid: Path, tmp_path: Path):
    build(partial_grid, tmp_path / "out", reps=50, figures=False)
    table = pd.read_csv(tmp_path / "out" / "tables" / "rliable_alfworld.csv").set_index("method")
    # task types are the tasks (2 eval tasks each): sharpo's one seed solves every type; grpo's seed means per type
    # are 0.5 (seed 0) and 0.5 or 0 (seed 1), so sharpo's seed beats both grpo seeds on every type
    assert table.loc["sharpo", "prob_improvement"] == 1.0
    assert np.isnan(table.loc["sharpo", "prob_improvement_low"])  # one seed: no interval
    assert table.loc["grpo", "n_seeds"] == 2 and table.loc["grpo", "n_task_types"] == 6
    assert table.loc["sharpo", "iqm"] == 1.0 and table.loc["grpo", "mean"] == pytest.approx(0.375)
    assert np.isnan(table.loc["grpo", "prob_improvement"])


def test_task_type_breakdown(tmp_path: Path):
    runs = tmp_path / "runs"
    write_run(runs, "alfworld", "grpo", 0, 0.5, outcomes=outcomes(6))  # tasks 0-5 solved: one of each type
    build(runs, tmp_path / "out", reps=20, figures=False)
    table = pd.read_csv(tmp_path / "out" / "tables" / "task_types_alfworld.csv")
    per_type = table.set_index("task_type")["success_pct"]
    assert per_type.drop("all").eq(50.0).all() and per_type["all"] == 50.0
    header = (tmp_path / "out" / "tables" / "task_types_alfworld.md").read_text().splitlines()[2]
    assert header == "| Method | pick | look | clean | heat | cool | pick2 | all |"


def test_webshop_and_lambda_tables(tmp_path: Path):
    runs = tmp_path / "runs"
    for method, p in [("grpo", 0.3), ("sharpo", 0.6), ("sharpo-lam0.2", 0.5)]:
        for seed in (0, 1):
            write_run(runs, "webshop", method, seed, p)
    build(runs, tmp_path / "out", reps=20, figures=False)
    webshop = pd.read_csv(tmp_path / "out" / "tables" / "webshop.csv").set_index("method")
    truth = load_runs(runs).runs.groupby("method")[["score", "success"]].mean() * 100
    assert webshop.loc["sharpo", "score_pct"] == pytest.approx(truth.loc["sharpo", "score"])
    assert webshop.loc["grpo", "success_pct"] == pytest.approx(truth.loc["grpo", "success"])
    sweep = pd.read_csv(tmp_path / "out" / "tables" / "lambda_sensitivity.csv")
    assert sorted(sweep["lam"].astype(str)) == ["0.05", "0.2"]  # the plain label carries sharpo's default λ


def test_no_runs_at_all_writes_marked_tables(tmp_path: Path):
    (tmp_path / "nothing").mkdir()  # an empty runs folder; a missing one is an error (test_figures_identity)
    paths = build(tmp_path / "nothing", tmp_path / "out", profile=str(FIXTURES / "grid4.yaml"), reps=20)
    markdown = (tmp_path / "out" / "tables" / "main.md").read_text()
    assert "| GRPO | — | 70.57 ± 7.83 |" in markdown
    assert len(pd.read_csv(tmp_path / "out" / "tables" / "missing_runs.csv")) == 4
    assert not any(p.suffix == ".png" for p in paths)


def test_a_corrupt_run_is_skipped_with_a_warning(tmp_path: Path):
    runs = tmp_path / "runs"
    write_run(runs, "alfworld", "grpo", 0, 0.5)
    bad = write_run(runs, "alfworld", "grpo", 1, 0.5)
    (bad / "done.json").write_text(json.dumps({"seed": 1}))
    with pytest.warns(UserWarning, match="seed1"):
        results = load_runs(runs)
    assert list(results.runs["seed"]) == [0]


@pytest.mark.parametrize(
    "label, name",
    [("sharpo", "SHARPO"), ("sharpo-lam0.2", "SHARPO (λ=0.2)"), ("sharpo-lam1e-05", "SHARPO (λ=1e-05)"),
     ("grpo_opsd", "GRPO+OPSD"), ("sdar-beta0.0-c0.1", "SDAR (β=0.0, c=0.1)"), ("mine", "mine")],
)
def test_display_names(label: str, name: str):
    assert render.method_name(label) == name


def test_cell_formats():
    assert render.fmt_pm(0.8490, 0.0119) == "84.9 ± 1.2"
    assert render.fmt_pm(float("nan")) == render.MISSING == "—"
    assert render.fmt_seeds("70.0", 2, 3) == "70.0 (2/3)" and render.fmt_seeds("70.0", 3, 3) == "70.0"
    assert render.tex_escape("a_b 5% ± —") == "a\\_b 5\\% $\\pm$ --"
