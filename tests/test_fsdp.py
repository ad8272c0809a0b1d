"""train.strategy=fsdp on the CPU: two torchrun processes with gloo (issue 13, item 2; harness/engine/distributed.py).

The launched commands are the README's ("A run on k GPUs"), with a temporary output folder, model cache and
MLflow store, and ``alfworld.max_steps=10`` so that the smoke policy's 50-step failures do not dominate the
test's time.
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import load_config
from harness.core.typed import ConfigError
from harness.engine import distributed
from harness.gpu_slots import train_command

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def _launch(args: list[str], work: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RANK", "WORLD_SIZE")}
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(TORCHRUN + args, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return done


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fsdp")


def _paths(work: Path) -> list[str]:
    return [f"output_dir={work}/runs", f"model.cache_dir={work}/models", f"tracking.uri=sqlite:///{work}/mlflow.db",
            f"tracking.artifact_root={work}/artifacts", "alfworld.max_steps=10"]


@pytest.fixture(scope="module")
def smoke_run(work) -> Path:
    """The 2-step smoke run on two ranks, through the CLI as the workflow launches it (it also builds the tiny
    model the update check reuses)."""
    _launch(["-m", "harness", "train", "--config", "config/smoke.yaml", "train.strategy=fsdp", "model.dtype=float32"]
            + _paths(work), work)
    return work / "runs" / "alfworld" / "grpo" / "seed0"


def test_two_rank_smoke_run_writes_done_json_and_one_mlflow_run(smoke_run, work):
    done = json.loads((smoke_run / "done.json").read_text())
    assert done["steps"] == 2 and done["final_eval_step"] == 2
    assert [json.loads(line)["step"] for line in (smoke_run / "metrics.jsonl").read_text().splitlines()] == [0, 1]
    eval_steps = [json.loads(line)["step"] for line in (smoke_run / "eval.jsonl").read_text().splitlines()]
    assert eval_steps == [0] * 4 + [2] * 4  # the 4-task panel at the start and at the end, written once
    with sqlite3.connect(work / "mlflow.db") as db:
        runs = db.execute("SELECT run_uuid, status FROM runs").fetchall()
        assert runs == [((smoke_run / "mlflow_run_id").read_text().strip(), "FINISHED")]
        logged = db.execute("SELECT step FROM metrics WHERE key = 'actor/loss' ORDER BY step").fetchall()
        assert logged == [(0,), (1,)]  # one rank logged each step once


def test_one_sharded_update_equals_one_process(smoke_run, work):
    """An odd number of micro-batches of 5 rows over 2 ranks (one rank repeats one with weight 0), mini-batches of
    12 rows (several optimizer steps) at lr 1e-3."""
    out = work / "update_check.json"
    _launch(["tests/fsdp_update_check.py", str(out), f"output_dir={work}/check", f"model.cache_dir={work}/models",
             "alfworld.max_steps=8", "train.ppo_mini_batch=12", "train.ppo_micro_batch=5", "train.lr=1e-3"], work)
    report = json.loads(out.read_text())
    print(json.dumps(report, indent=1))  # the measured numbers, shown with pytest -s
    for local, total in report["local_parameters"]:
        assert 0.45 < local / total < 0.55, report["local_parameters"]  # each rank holds about half
    assert report["micro_batches"] % 2 == 1  # the uneven split is exercised
    assert report["compared_tensors"] == report["single_tensors"]
    assert report["old_logp_max_abs_diff"] < 1e-5
    assert report["reference_sharded"] and report["reference_max_abs_diff"] < 1e-6  # π_ref = the starting policy
    for key in ("actor/loss", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
        assert report["metric_abs_diff"][key] < 1e-5, (key, report["metric_abs_diff"])
    assert report["weight_max_abs_change"] > 1e-3  # the update moved the weights, so the comparison means something
    assert report["weight_max_abs_diff"] < 1e-5
    assert report["teacher_max_abs_diff"] < 1e-5  # the teacher pass split over the ranks = one process's
    assert sum(report["teacher_forward_rows"]) < 1.5 * report["rows"]  # each rank about half, not all of them
    assert report["engine_weights_max_abs_diff"] == [0.0, 0.0]  # an engine with its own weights gets the full ones
    assert report["checkpoint_max_abs_diff"] == 0.0  # the full state saved by rank 0 restores exactly


def test_task_shares_cover_every_task_once():
    for count in range(0, 9):
        for world in (1, 2, 3, 4):
            shares = [range(count)[distributed.task_share(count, r, world)] for r in range(world)]
            assert [i for share in shares for i in share] == list(range(count))
            assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_the_first_share_samples_as_one_process():
    assert distributed.shard_seed(123, 0) == 123
    assert distributed.shard_seed(123, 2) != distributed.shard_seed(123, 3) != 123


def test_compute_dtype_names_accelerate_mixed_precision():
    assert distributed.MIXED_PRECISION == {"bfloat16": "bf16", "float16": "fp16", "float32": "no"}


def test_strategy_is_checked(monkeypatch):
    with pytest.raises(ConfigError, match="train.strategy"):
        load_config(ROOT / "config" / "smoke.yaml", ["train.strategy=ddp"])
    with pytest.raises(ConfigError, match="float16 is not accepted with train.strategy=fsdp"):
        load_config(ROOT / "config" / "smoke.yaml", ["train.strategy=fsdp", "model.dtype=float16"])
    single = load_config(ROOT / "config" / "smoke.yaml")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert "pass train.strategy=fsdp" in distributed.launch_problem(single)
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert distributed.launch_problem(single) is None
    fsdp = load_config(ROOT / "config" / "smoke.yaml", ["train.strategy=fsdp"])
    assert distributed.launch_problem(fsdp) is None
    monkeypatch.delenv("WORLD_SIZE")
    assert "started by torchrun" in distributed.launch_problem(fsdp)
    assert distributed.launch_problem(single) is None


def test_the_workflow_launches_fsdp_runs_with_torchrun():
    assert train_command("py", "single", 8) == "py -m harness train"
    assert (train_command("py", "fsdp", 8)
            == "py -m torch.distributed.run --standalone --nproc_per_node 8 -m harness train")
    assert train_command("py", "fsdp", 0).endswith("--nproc_per_node 1 -m harness train")


def test_env_workers_are_the_jobs_total_split_over_the_ranks(monkeypatch):
    paper = load_config(ROOT / "config" / "paper.yaml")
    assert paper.rollout.env_workers == 16
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert distributed.env_workers(paper) == 2  # 16 ALFWorld processes on the node, not 128
    monkeypatch.setenv("WORLD_SIZE", "32")
    assert distributed.env_workers(paper) == 1
    assert distributed.env_workers(load_config(ROOT / "config" / "smoke.yaml")) == 0  # in-process stays so
    monkeypatch.delenv("WORLD_SIZE")
    assert distributed.env_workers(paper) == 16
