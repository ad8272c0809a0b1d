"""The compute-matched GRPO arm (harness/grid/compute_match.py) and method display names taken from the method
classes: the arm's counted cost is within 10% of the grid's costliest method's, and both the arm and a method
registered here appear under their display names in a table built from a stand-in runs folder."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml
from workflow_fixtures.synthetic_runs import write_run

from harness.config import load_config
from harness.core import registry
from harness.core.ranges import Checked
from harness.core.typed import ConfigError
from harness.grid.compute_match import (
    COMPUTE_MATCHED,
    DISPLAY,
    arm_run_cost,
    budget_basis,
    load_basis,
    plan,
    run_cost,
    step_cost,
)
from harness.grid.runs import load_grid
from methods.grpo import Grpo
from paper_figures import render, tables
from paper_figures.load import load_runs

REPO = Path(__file__).resolve().parents[1]


def profile_with(tmp_path: Path, base: str, **grid) -> Path:
    """A copy of config/<base>.yaml with grid keys replaced."""
    raw = yaml.safe_load((REPO / "config" / f"{base}.yaml").read_text())
    raw["grid"].update(grid)
    path = tmp_path / f"{base}_cm.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def check_arm(grid) -> list:
    """Every benchmark × seed has the arm, and its counted cost is within 10% of the costliest method's."""
    arms = [r for r in grid.runs if r.label == COMPUTE_MATCHED]
    assert {(r.benchmark, r.seed) for r in arms} == {(r.benchmark, r.seed) for r in grid.runs}
    basis = load_basis(grid.compute_basis) if grid.compute_basis else None  # the profile's measured basis
    for arm in arms:
        others = [r for r in grid.runs if r.benchmark == arm.benchmark and r.label != COMPUTE_MATCHED]
        costliest = max(arm_run_cost(grid.profile_path, r.override_items(), basis) for r in others)
        planned = arm_run_cost(grid.profile_path, arm.override_items(), basis)
        assert abs(planned - costliest) <= 0.10 * costliest, (arm.extra, planned, costliest)
        cfg = load_config(grid.profile_path, arm.override_items())
        assert cfg.method.name == "grpo" and cfg.run_dir.parts[-2] == COMPUTE_MATCHED  # its own run folder
    return arms


def optimizer_steps(cfg, rows_per_rollout: float = 11.0) -> int:
    """Optimizer steps of one RL step whose rollouts hold ``rows_per_rollout`` rows each (harness/engine/update.py)."""
    rows = round(cfg.rollout.tasks_per_step * cfg.rollout.group_size * rows_per_rollout)
    return cfg.train.ppo_epochs * -(-rows // cfg.train.ppo_mini_batch)


def test_default_grid_has_the_arm_within_ten_percent():
    grid = load_grid("cpu", REPO / "config")
    arms = check_arm(grid)
    assert {"rlsd", "sharpo", "oracle_fatal", "oracle_decisive", COMPUTE_MATCHED} <= set(grid.method_labels)
    # planned from the shipped token basis (grid.compute_basis); the mini-batch grows with the group
    cfg = load_config(REPO / "config" / "cpu.yaml", list(arms[0].override_items()))
    grpo = load_config(REPO / "config" / "cpu.yaml", ["method=grpo"])
    assert cfg.rollout.group_size > grpo.rollout.group_size and cfg.train.steps == grpo.train.steps
    assert optimizer_steps(cfg) == optimizer_steps(grpo)


def test_paper_profile_keeps_six_methods_and_plans_the_arm_when_asked(tmp_path):
    paper = load_grid("paper", REPO / "config")
    assert paper.method_labels == ["grpo", "grpo_opsd", "rlsd", "sdar", "stepopsd", "sharpo"]
    added = ["grpo", "grpo_opsd", "rlsd", "sdar", "stepopsd", "sharpo", "gigpo", "hgpo", "agentopsd"]
    check_arm(load_grid(str(profile_with(tmp_path, "paper", methods=added, compute_matched=True))))


def test_small_groups_also_scale_the_steps(tmp_path):
    path = profile_with(tmp_path, "cpu", methods=["grpo", "sharpo"], compute_matched=True)
    raw = yaml.safe_load(path.read_text())
    raw["rollout"]["group_size"] = 2  # 3/2 overshoots 7/6 by 29%: steps make up the rest
    path.write_text(yaml.safe_dump(raw))
    arms = check_arm(load_grid(str(path)))
    assert any(e.startswith("train.steps=") for e in arms[0].extra)


def test_no_arm_when_grpo_is_already_the_costliest(tmp_path):
    grid = load_grid(str(profile_with(tmp_path, "cpu", methods=["grpo", "gigpo", "hgpo"], compute_matched=True)))
    assert COMPUTE_MATCHED not in grid.method_labels


def test_the_teacher_pass_is_one_forward_over_the_rows():
    cfg = load_config(REPO / "config" / "cpu.yaml", ["method=grpo"])
    row = cfg.rollout.max_prompt_tokens + cfg.rollout.max_response_tokens
    assert step_cost(cfg, "skills") - step_cost(cfg, None) == row + getattr(cfg.rollout, "teacher_context_tokens", 0)
    assert step_cost(cfg, None) == 6 * row  # generate, old log-probs, reference, update (forward + backward)
    bigger = load_config(REPO / "config" / "cpu.yaml", ["method=grpo", "rollout.group_size=16"])
    assert run_cost(bigger, None) == 2 * run_cost(cfg, None)


@dataclass
class _NoOptions(Checked):
    pass


class _StandIn(Grpo):
    Config = _NoOptions
    display_name = "Stand-in Method"
    display_order = 12

    def advantages(self, batch, step=0):  # pragma: no cover - never trained here
        raise AssertionError


def test_tables_take_display_names_from_the_method_class(tmp_path):
    registry.register("standin_method")(_StandIn)
    try:
        runs = tmp_path / "runs"
        for seed in range(2):
            for label, p in [("grpo", 0.5), ("standin_method", 0.6), (COMPUTE_MATCHED, 0.55), ("sharpo", 0.7)]:
                write_run(runs, "gates", label, seed, p)
        results = load_runs(runs)
        ctx = tables.Context(expected=results.runs[["benchmark", "method", "seed"]],
                             reference=tables.load_reference())
        _, display = tables.main_table(results, ctx)
        names = list(display["Method"])
        assert names.index("GRPO") < names.index("Stand-in Method") < names.index(DISPLAY) < names.index("SHARPO")
        assert render.method_name("standin_method") == "Stand-in Method"
    finally:
        registry.METHODS.unregister("standin_method")


@pytest.mark.parametrize("name", ["agentopsd", "hgpo"])
def test_new_methods_have_their_names_in_tables(name):
    assert render.method_name(name) == {"agentopsd": "AgentOPSD", "hgpo": "HGPO"}[name]


def write_basis(path: Path, student: float, teacher: dict) -> Path:
    path.write_text(json.dumps({"student_tokens_per_row": student, "teacher_tokens_per_row": teacher}))
    return path


def test_a_measured_basis_plans_from_the_tokens_processed(tmp_path):
    """Budgets count a teacher row as 128 + 12 + 384 tokens; a basis that measured 50 student and 100 teacher
    tokens a row plans a smaller group (per row: GRPO 6 × 50 = 300, RLSD 300 + 100 = 400, so G 8 → 11)."""
    profile = profile_with(tmp_path, "cpu", methods=["grpo", "rlsd"], compute_matched=True)
    arms = [["benchmark=gates", "method=grpo"], ["benchmark=gates", "method=rlsd"]]
    by_budget = plan(profile, "gates", arms)
    measured = plan(profile, "gates", arms, str(write_basis(tmp_path / "b.json", 50.0, {"skills": 100.0})))
    assert "rollout.group_size=11" in measured and "train.ppo_mini_batch=176" in measured  # 128 × 11/8
    assert by_budget != measured
    cfg = load_config(profile, ["method=grpo"])
    assert step_cost(cfg, "skills", load_basis(tmp_path / "b.json")) == 400.0
    assert step_cost(cfg, "skills") == step_cost(cfg, "skills", budget_basis(cfg))


def test_a_basis_without_the_methods_context_or_unreadable_is_a_clear_error(tmp_path):
    profile = profile_with(tmp_path, "cpu", methods=["grpo", "sharpo"], compute_matched=True)
    arms = [["benchmark=gates", "method=grpo"], ["benchmark=gates", "method=sharpo"]]
    with pytest.raises(ConfigError, match="successful_sibling.*sharpo.*paper_figures.compute_basis"):
        plan(profile, "gates", arms, str(write_basis(tmp_path / "b.json", 50.0, {"skills": 100.0})))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a token basis"):
        plan(profile, "gates", arms, str(tmp_path / "bad.json"))
    with pytest.raises(ConfigError, match="does not exist"):
        plan(profile, "gates", arms, str(tmp_path / "none.json"))


def test_the_basis_is_measured_from_logged_runs(tmp_path):
    """Student tokens a row over every run; teacher tokens a row over the runs of the methods using the context."""
    from paper_figures.compute_basis import measure

    runs = tmp_path / "runs"
    for label, teacher in [("grpo", None), ("rlsd", 300.0)]:
        run_dir = write_run(runs, "gates", label, 0, 0.5)
        frame = pd.read_csv(run_dir / "metrics.csv")
        frame["train/rows"], frame["train/tokens"] = 10, 500
        if teacher is not None:
            frame["cost/teacher_tokens"] = teacher * 2
        frame.to_csv(run_dir / "metrics.csv", index=False)
    basis = measure(runs)
    assert basis["student_tokens_per_row"] == 50.0 and basis["teacher_tokens_per_row"] == {"skills": 60.0}


def test_the_cost_table_puts_planned_and_measured_ratios_side_by_side(tmp_path):
    runs = tmp_path / "runs"
    for label, tokens, seconds in [("grpo", 1000.0, 2.0), ("rlsd", 1300.0, 3.0)]:
        for seed in range(2):
            run_dir = write_run(runs, "gates", label, seed, 0.5)
            frame = pd.read_csv(run_dir / "metrics.csv")
            frame["cost/tokens"], frame["time/step_s"], frame["actor/optimizer_steps"] = tokens, seconds, 5
            frame.to_csv(run_dir / "metrics.csv", index=False)
    results = load_runs(runs)
    expected = results.runs[["benchmark", "method", "seed"]].assign(
        planned_step_cost=lambda f: f["method"].map({"grpo": 600.0, "rlsd": 720.0}))
    tidy, display = tables.cost_table(results, tables.Context(expected=expected, reference=tables.load_reference()))
    rlsd = tidy.set_index("method").loc["rlsd"]
    assert (rlsd["planned_ratio"], rlsd["token_ratio"], rlsd["step_time_ratio"]) == pytest.approx((1.2, 1.3, 1.5))
    assert rlsd["optimizer_steps"] == 5
    assert list(display.set_index("Method").loc["RLSD", ["Planned × GRPO", "Step time × GRPO (measured)"]]) == \
        ["1.20", "1.50"]
