"""Tracking at cluster scale: runs log to a real ``mlflow server`` (started here on 127.0.0.1 with a sqlite backend
store) found through MLFLOW_TRACKING_URI; an unreachable server stops a run before anything is built."""
from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from harness.records.tracking import EXPERIMENT_KIND, experiment_name, resolve_uri
from tests.engine_helpers import toy_config

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URI = "${MLFLOW_TRACKING_URI:-sqlite:///results/mlflow.db}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``mlflow server`` as the README starts it on a head node; its URI. Killed (its whole group) at the end."""
    root = tmp_path_factory.mktemp("mlflow_server")
    port = free_port()
    log = open(root / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{root / 'store.db'}",
                             "--artifacts-destination", str(root / "artifacts"), "--workers", "1"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120  # a fresh store migrates its schema first: ~40 s on 2 busy cores
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"mlflow server did not start: {(root / 'server.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield uri
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_the_uri_comes_from_the_environment_and_defaults_to_the_sqlite_file():
    assert resolve_uri(DEFAULT_URI, {}) == "sqlite:///results/mlflow.db"
    assert resolve_uri(DEFAULT_URI, {"MLFLOW_TRACKING_URI": "http://head:5000"}) == "http://head:5000"
    assert resolve_uri("sqlite:///x.db", {"MLFLOW_TRACKING_URI": "http://head:5000"}) == "sqlite:///x.db"
    with pytest.raises(ValueError, match=r"needs \$MLFLOW_SERVER, which is not set"):
        resolve_uri("${MLFLOW_SERVER}", {})
    assert experiment_name("smoke", "alfworld") != experiment_name("paper", "alfworld")


def check_runs(uri: str, experiment: str, names: list[str], metrics: set[str]) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, [e.name for e in client.search_experiments()]
    assert found.tags.get("mlflow.experimentKind") == EXPERIMENT_KIND["mlflow.experimentKind"]
    runs = client.search_runs([found.experiment_id])
    assert sorted(r.info.run_name for r in runs) == sorted(names)
    for run in runs:
        assert run.info.status == "FINISHED" and metrics <= set(run.data.metrics)
        history = client.get_metric_history(run.info.run_id, "train/success")
        assert [m.step for m in history] == sorted(m.step for m in history) and history
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"protocol.json", "metrics.csv", "eval.csv"} <= artifacts
        local = Path(client.download_artifacts(run.info.run_id, "metrics.csv"))
        assert local.read_text().startswith("step")


def test_a_run_logs_everything_to_the_server(server, tmp_path, monkeypatch):
    from harness.engine.trainer import train

    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    cfg = toy_config(tmp_path, tracking=True, model={"warm_start_epochs": 0}, train={"steps": 2}, eval={"every": 2})
    train(dataclasses.replace(cfg, tracking=dataclasses.replace(cfg.tracking, uri=DEFAULT_URI)))
    check_runs(server, "test/toy", ["grpo-toy-seed0"], {"train/success", "logp_gap", "eval/success"})


def test_an_unreachable_server_stops_the_run_before_anything_is_built(tmp_path):
    shutil.copytree(ROOT / "config", tmp_path / "config")
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": uri}
    start = time.time()
    done = subprocess.run([sys.executable, "-m", "harness", "train", "--config", "config/smoke.yaml"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and f"tracking server {uri} does not answer" in done.stderr
    assert time.time() - start < 60  # not MLflow's minutes of retries
    assert not (tmp_path / "results").exists()  # no run folder, no model built


@pytest.mark.slow  # ~5.5 min on 2 shared cores: two smoke runs of ~170 s each, then the tables
def test_the_smoke_profile_logs_every_run_to_the_server(server, tmp_path):
    shutil.copytree(ROOT / "config", tmp_path / "config")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": server}
    done = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory",
                           str(tmp_path), "--cores", "2", "--config", "profile=smoke"], env=env, capture_output=True,
                          text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    check_runs(server, "smoke/alfworld", ["grpo-alfworld-seed0", "sharpo-alfworld-seed0"],
               {"train/success", "eval/success"})
    assert not (tmp_path / "results" / "mlflow.db").exists()  # nothing went to the local sqlite file
