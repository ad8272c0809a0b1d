"""The engine on Gates: a tiny model warm-started on the format expert, then RL steps with a teacher method and
GiGPO (anchor states), and the frozen control of the grid (lr 0: the weights do not move, no update runs)."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from harness.engine import checkpoint
from harness.engine.trainer import train
from tests.engine_helpers import toy_config

GATES = {"horizon": 2, "pivots": 1, "choices": 2, "train_panel_size": 40, "eval_panel_size": 8}


def gates_config(tmp_path, models, **sections):
    return toy_config(tmp_path, models, benchmark="gates", gates=GATES, **sections)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.mark.parametrize("method", ["rlsd", "gigpo"])
def test_rl_steps_run_on_gates(models, tmp_path, method):
    run_dir = train(gates_config(tmp_path, models, method=method, train={"steps": 1}))
    metrics = pd.read_csv(run_dir / "metrics.csv")
    assert len(metrics) == 1 and metrics["train/rows"].iloc[0] > 0
    # Gates labels its turns: the engine scores the method's advantages against them (docs/credit.md)
    assert {"credit/fatal_auroc", "credit/detour_auroc", "credit/fatal_episodes"} <= set(metrics.columns)
    if method == "rlsd":
        assert metrics["teacher/available_frac"].iloc[0] == 1.0  # the gates skill text reaches every row
    else:
        assert metrics["method/step_group_size_mean"].iloc[0] > 1.0  # siblings share observations: anchor states
    assert json.loads((run_dir / "done.json").read_text())["benchmark"] == "gates"


def test_frozen_control_keeps_the_warm_start(models, tmp_path):
    cfg = gates_config(tmp_path, models, train={"steps": 2, "lr": 0.0}, run_label="frozen",
                       rollout={"history_length": 0})
    run_dir = train(cfg)
    assert run_dir.parts[-2] == "frozen"
    # lr 0 spends nothing on the update: no backward, no optimizer step (so no actor/ metrics either)
    metrics = pd.read_csv(run_dir / "metrics.csv")
    assert (metrics["time/update_s"] < 0.01).all() and not any(c.startswith("actor/") for c in metrics.columns)
    # Gates' eval also gives each task's exact success probability (envs/gates/exact.py), beside the sampled one
    evals = pd.read_csv(run_dir / "eval.csv")
    assert evals["success_exact"].between(0, 1).all() and evals["success_exact"].notna().all()
    final = json.loads((run_dir / "done.json").read_text())["final_eval"]
    assert final["success_exact"] == pytest.approx(evals[evals.step == 2]["success_exact"].mean())
    from harness.policy.models import load_policy
    from harness.policy.source import tiny_model_dir

    start, _ = load_policy(tiny_model_dir(cfg), "float32", "cpu")
    state = torch.load(run_dir / checkpoint.CHECKPOINT, weights_only=False)["model"]
    assert all(torch.equal(state[k], v) for k, v in start.state_dict().items() if k in state)
