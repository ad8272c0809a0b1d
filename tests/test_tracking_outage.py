"""Tracking never stops training (docs/recovery.md): a real ``mlflow server`` goes away after the first logged step.
Training goes on and writes its files; the buffered calls reach the server once it is back, each (metric, step)
exactly once; a server that never comes back leaves a finished run whose done.json names what is unsent, and
``python -m harness sync`` fills MLflow afterwards."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import harness.engine.trainer as trainer
from harness.records.outbox import OUTBOX, Journal
from tests.engine_helpers import toy_config
from tests.mlflow_server import MlflowServer, logged_pairs

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("mlflow_server")).start()
    yield server
    server.stop()


@pytest.fixture
def server(shared_server):
    """The module's server, running when a test starts (a test stops and restarts it on the same port and store)."""
    if not shared_server.answers():
        shared_server.start()
    return shared_server


def outage_config(tmp_path, models, uri, **tracking):
    cfg = toy_config(tmp_path / "run", models, tracking=True, train={"steps": 6, "checkpoint_every": 100},
                     eval={"every": 3})
    return dataclasses.replace(cfg, tracking=dataclasses.replace(cfg.tracking, uri=uri, **tracking))


def stop_server_after_first_step(monkeypatch, server, restart_after_s: float | None) -> dict:
    """Stop ``server`` when step 1 starts (step 0 is logged); start it again ``restart_after_s`` later in the
    background. Returns the times of the stop, the restart and of each step's end."""
    real, times = trainer.rl_step, {"steps": {}}

    def restart():
        time.sleep(restart_after_s)
        server.start()
        times["restarted"] = time.time()

    def step(ctx, number):
        if number == 1:
            server.stop()
            times["stopped"] = time.time()
            if restart_after_s is not None:
                threading.Thread(target=restart, daemon=True).start()
        metrics = real(ctx, number)
        times["steps"][number] = time.time()
        return metrics

    monkeypatch.setattr(trainer, "rl_step", step)
    return times


def expected_pairs(run_dir: Path) -> Counter:
    """Every finite (metric, step) the run handed to its tracker, from its journal."""
    return Counter((key.replace("@", "_"), entry["step"]) for entry in Journal(run_dir / OUTBOX).entries()
                   for key, value in entry["metrics"].items() if math.isfinite(value))


def assert_logged_once(uri: str, run_dir: Path, steps: int) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("test/toy")
    runs = client.search_runs([experiment.experiment_id], filter_string=f'tags.run_dir = "{run_dir.resolve()}"')
    assert [r.info.status for r in runs] == ["FINISHED"]
    held = Counter(logged_pairs(uri, runs[0].info.run_id))
    assert held == expected_pairs(run_dir)  # every pair, none twice
    assert sorted(step for key, step in held if key == "train/success") == list(range(steps))
    assert {"metrics.csv", "eval.csv", "protocol.json"} <= {a.path for a in client.list_artifacts(runs[0].info.run_id)}


def test_a_short_outage_stalls_nothing_and_loses_or_doubles_nothing(models, tmp_path, monkeypatch, server):
    cfg = outage_config(tmp_path, models, server.uri, request_timeout_s=1.0, retry_max_s=2.0, flush_timeout_s=300)
    times = stop_server_after_first_step(monkeypatch, server, restart_after_s=20)
    run_dir = trainer.train(cfg)
    assert times["steps"][5] < times["restarted"]  # every step ran while the server was down: no stall
    assert "mlflow_unsent" not in json.loads((run_dir / "done.json").read_text())
    assert_logged_once(server.uri, run_dir, steps=6)


@pytest.mark.slow  # ~7 min: the server stays away 330 s, past MLflow's own retry window (7 retries, ~4 min)
def test_a_330_s_outage_with_default_timeouts(models, tmp_path, monkeypatch, server):
    cfg = outage_config(tmp_path, models, server.uri, flush_timeout_s=600)
    times = stop_server_after_first_step(monkeypatch, server, restart_after_s=330)
    run_dir = trainer.train(cfg)
    assert times["steps"][5] - times["stopped"] < 120  # training did not wait for the server
    assert_logged_once(server.uri, run_dir, steps=6)


def test_a_server_that_never_returns_leaves_a_finished_run_that_sync_backfills(models, tmp_path, monkeypatch,
                                                                               server):
    cfg = outage_config(tmp_path, models, server.uri, request_timeout_s=1.0, retry_max_s=1.0, flush_timeout_s=2)
    stop_server_after_first_step(monkeypatch, server, restart_after_s=None)
    start = time.time()
    run_dir = trainer.train(cfg)
    assert time.time() - start < 120
    unsent = json.loads((run_dir / "done.json").read_text())["mlflow_unsent"]
    assert unsent["status"] == "FINISHED" and unsent["last_step"] == 6 and unsent["metric_steps"] >= 6
    assert "harness sync" in unsent["fix"]
    server.start()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": server.uri}
    for _ in range(2):  # a second sync finds nothing left to send
        done = subprocess.run([sys.executable, "-m", "harness", "sync", str(run_dir), "--uri", server.uri], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout[done.stdout.index("{\n"):])["metrics_sent"] == 0  # after MLflow's own lines
    assert_logged_once(server.uri, run_dir, steps=6)
