"""The smoke profile end to end, for real: snakemake → 2 training runs on the tiny model → MLflow → tables and figures.

It runs in a temporary working directory (so it never touches results/ of the checkout) with the smoke profile as
shipped, and checks that the tables hold the runs' own numbers.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def smoke_results(tmp_path_factory):
    work = tmp_path_factory.mktemp("smoke")
    shutil.copytree(ROOT / "config", work / "config")
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(work),
           "--cores", "2", "--config", "profile=smoke"]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}  # the local default: the sqlite file
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    logs = "\n".join(p.read_text()[-3000:] for p in (work / "results" / "smoke" / "logs").rglob("*.log")) \
        if (work / "results" / "smoke" / "logs").exists() else ""
    assert done.returncode == 0, f"snakemake failed:\n{done.stderr[-4000:]}\n{logs}"
    return work / "results"


def test_smoke_runs_finish_with_protocol_and_metrics(smoke_results):
    runs = sorted((smoke_results / "smoke" / "runs" / "alfworld").glob("*/seed0/done.json"))
    assert [p.parent.parent.name for p in runs] == ["grpo", "sharpo"]
    for done_path in runs:
        run_dir = done_path.parent
        done = json.loads(done_path.read_text())
        assert done["steps"] == 2
        metrics = pd.read_csv(run_dir / "metrics.csv")
        assert list(metrics["step"]) == [0, 1]
        protocol = json.loads((run_dir / "protocol.json").read_text())
        assert protocol["sha256"] == done["protocol_sha256"] and protocol["panels"]["eval"]["size"] == 4


def test_smoke_tables_hold_the_runs_numbers(smoke_results):
    main = pd.read_csv(smoke_results / "smoke" / "tables" / "main.csv")
    text = main.to_csv()
    for done_path in (smoke_results / "smoke" / "runs" / "alfworld").glob("*/seed0/done.json"):
        success = json.loads(done_path.read_text())["final_eval"]["success"]
        assert f"{100 * success:.1f}" in text or f"{100 * success:.2f}" in text, (success, text)
    for ext in ("md", "tex"):
        assert (smoke_results / "smoke" / "tables" / f"main.{ext}").stat().st_size > 0
    for ext in ("png", "pdf"):
        assert (smoke_results / "smoke" / "figures" / f"learning_curves.{ext}").stat().st_size > 1000


def test_smoke_runs_are_in_mlflow(smoke_results):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{smoke_results / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("smoke/alfworld")  # the profile in the name: never beside paper runs
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI opens on the runs table
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["grpo-alfworld-seed0", "sharpo-alfworld-seed0"]
    assert all(r.info.status == "FINISHED" and "eval/success" in r.data.metrics for r in runs)


def test_soak_two_kills_reach_the_uninterrupted_tables(smoke_results, tmp_path):
    """perf/soak.py with N = 2: the smoke grid interrupted twice at random moments (SIGKILL, then SIGTERM) and
    resumed each time ends with the tables, per-run logs and MLflow runs of the uninterrupted grid above."""
    cmd = [sys.executable, "-m", "perf.soak", "--kills", "2",
           "--reference", str(smoke_results.parent), "--work", str(tmp_path / "soak")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["kills"] == 2 and summary["equal_to_reference"]
