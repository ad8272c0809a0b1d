"""Save on the signal (docs/recovery.md): SIGTERM or SIGUSR1 stop a run at the step it reached with a checkpoint,
MLflow says KILLED, the CLI exits EXIT_REQUEUE, and ``--resume`` reaches the uninterrupted run's numbers."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import harness.engine.trainer as trainer
from harness.config import to_dict
from harness.engine import checkpoint
from harness.engine.interrupt import EXIT_REQUEUE, Interrupted, StepAbandoned, StopRequest
from harness.records.run_state import load_checkpoint
from tests.engine_helpers import assert_same_logs, toy_config

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys, tests.toy_benchmark; from harness.cli import main; sys.exit(main(sys.argv[1:]))"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture
def stop():
    request = StopRequest().install()
    yield request
    request.uninstall()


def _mlflow_status(cfg, run_dir: Path) -> str:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=cfg.tracking.uri)
    return client.get_run((run_dir / "mlflow_run_id").read_text().strip()).info.status


def test_a_signal_while_the_update_runs_sets_a_flag_and_one_while_generating_abandons():
    request = StopRequest().install()
    try:
        with request.abandonable():
            pass
        os.kill(os.getpid(), signal.SIGUSR1)  # outside the abandonable part: only the flag
        assert request.signum == signal.SIGUSR1
        with pytest.raises(StepAbandoned):
            with request.abandonable():  # a flag already set drops the next step at its start
                pass
        late = StopRequest().install()
        with pytest.raises(StepAbandoned):
            with late.abandonable():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)  # the handler raises here
        os.kill(os.getpid(), signal.SIGTERM)  # a second signal: no exception, the first one's number stays
        assert late.signum == signal.SIGTERM
        late.uninstall()
    finally:
        request.uninstall()


def _signal_at(monkeypatch, name: str, at_step: int) -> None:
    """SIGTERM to this process when the trainer's ``name`` (sample_tasks: the rollout; ppo_update: the update)
    is called for step ``at_step``."""
    real = getattr(trainer, name)

    def wrapped(*args):
        step = args[1] if name == "sample_tasks" else args[7]
        if step == at_step:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args)

    monkeypatch.setattr(trainer, name, wrapped)


@pytest.mark.parametrize("phase,reached", [("sample_tasks", 2), ("ppo_update", 3)])
def test_sigterm_saves_the_step_reached_and_resume_matches(models, tmp_path, monkeypatch, stop, phase, reached):
    """In the rollout the step is abandoned (checkpoint at 2); in the update it is finished first (at 3)."""
    sections = {"train": {"steps": 5, "checkpoint_every": 100}, "eval": {"every": 2}}
    reference = trainer.train(toy_config(tmp_path / "ref", models, **sections))
    cfg = toy_config(tmp_path / "run", models, tracking=True, **sections)
    _signal_at(monkeypatch, phase, at_step=2)
    with pytest.raises(Interrupted) as stopped:
        trainer.train(cfg, stop=stop)
    assert stopped.value.next_step == reached
    assert load_checkpoint(cfg.run_dir / "checkpoint.pt")["next_step"] == reached
    assert len((cfg.run_dir / "metrics.jsonl").read_text().splitlines()) == reached
    assert not (cfg.run_dir / "done.json").exists()
    assert _mlflow_status(cfg, cfg.run_dir) == "KILLED"
    monkeypatch.undo()
    resumed = trainer.train(cfg, resume=True)
    assert_same_logs(reference, resumed)
    assert _mlflow_status(cfg, resumed) == "FINISHED"


def test_a_second_signal_during_the_save_does_not_cut_it_short(models, tmp_path, monkeypatch, stop):
    cfg = toy_config(tmp_path, models, train={"steps": 4, "checkpoint_every": 100})
    real_save = checkpoint.save

    def save_under_fire(ctx, next_step, elapsed):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the checkpoint is written
        os.kill(os.getpid(), signal.SIGUSR1)
        return real_save(ctx, next_step, elapsed)

    monkeypatch.setattr(checkpoint, "save", save_under_fire)
    _signal_at(monkeypatch, "sample_tasks", at_step=1)
    with pytest.raises(Interrupted):
        trainer.train(cfg, stop=stop)
    assert load_checkpoint(cfg.run_dir / "checkpoint.pt")["next_step"] == 1
    assert not (cfg.run_dir / "checkpoint.tmp").exists()


def test_sigterm_to_a_cli_run_exits_for_requeue_with_a_checkpoint_and_resumes(models, tmp_path):
    """The acceptance check: a CPU run given SIGTERM after its second step (checkpoint_every 100)."""
    sections = {"train": {"steps": 12, "checkpoint_every": 100}, "eval": {"every": 4}}
    reference = trainer.train(toy_config(tmp_path / "ref", models, **sections))
    cfg = toy_config(tmp_path / "run", models, tracking=True, **sections)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(to_dict(cfg)))
    command = [sys.executable, "-c", CLI, "train", "--config", str(tmp_path / "run.yaml"), "--resume"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    journal = cfg.run_dir / "metrics.jsonl"
    deadline = time.time() + 300
    while not (journal.exists() and len(journal.read_text().splitlines()) >= 2):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    sent = time.time()
    output = proc.communicate(timeout=120)[0]
    print(f"exited {time.time() - sent:.1f} s after SIGTERM")  # shown with -s
    assert time.time() - sent < 120
    assert proc.returncode == EXIT_REQUEUE, output[-3000:]
    reached = len(journal.read_text().splitlines())
    assert 2 <= reached < 12 and load_checkpoint(cfg.run_dir / "checkpoint.pt")["next_step"] == reached
    assert "stopped by SIGTERM" in output and _mlflow_status(cfg, cfg.run_dir) == "KILLED"
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"resumed from the checkpoint of step {reached}" in done.stdout
    assert_same_logs(reference, cfg.run_dir)
    assert json.loads((cfg.run_dir / "done.json").read_text())["steps"] == 12
    assert _mlflow_status(cfg, cfg.run_dir) == "FINISHED"
