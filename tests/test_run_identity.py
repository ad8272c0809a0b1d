"""A finished run stands only for its own protocol; a failed start blocks nothing; MLflow tells the truth about
every run; torn logs and corrupt checkpoints are named, not tracebacks (issue 18's table, one test per row)."""
from __future__ import annotations

import dataclasses
import json
import sys

import pandas as pd
import pytest
import yaml

import harness.engine.checkpoint
import harness.engine.trainer
import harness.policy.source
from harness.config import to_dict
from harness.engine.trainer import train
from tests.engine_helpers import comparable_metrics, toy_config


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def as_profile(cfg, path) -> str:
    """The toy config as a YAML profile, so the command line (and its exit code) can be tested."""
    raw = to_dict(cfg)
    raw["method"] = {"name": cfg.method.name, **cfg.method.options}
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def mlflow_runs(cfg):
    from mlflow.tracking import MlflowClient

    from harness.records.tracking import experiment_name, resolve_uri

    client = MlflowClient(tracking_uri=resolve_uri(cfg.tracking.uri))
    experiment = client.get_experiment_by_name(experiment_name(cfg.profile, cfg.benchmark))
    runs = [] if experiment is None else client.search_runs([experiment.experiment_id])
    return client, [r for r in runs if r.info.run_name == cfg.name]


def kill_at_checkpoint(monkeypatch, next_step: int):
    """Die while writing the checkpoint of ``next_step``: the rows of the step before it are logged but not kept."""
    real = harness.engine.checkpoint.save

    def save(ctx, step, elapsed):
        if step == next_step:
            raise KeyboardInterrupt("simulated kill")
        return real(ctx, step, elapsed)

    monkeypatch.setattr(harness.engine.checkpoint, "save", save)
    return real


# --- run identity --------------------------------------------------------------------------------------------
def test_finished_run_with_other_steps_is_an_error_naming_the_key(models, tmp_path, capsys):
    from harness.cli import main

    train(toy_config(tmp_path, models))
    longer = toy_config(tmp_path, models, train={"steps": 5})
    code = main(["train", "--config", as_profile(longer, tmp_path / "p.yaml")])
    err = capsys.readouterr().err
    assert code != 0
    assert "train.steps" in err and "3" in err and "5" in err
    assert "--force" in err and "output_dir" in err
    assert json.loads((longer.run_dir / "done.json").read_text())["steps"] == 3  # the finished run is kept


def test_finished_run_under_its_own_protocol_is_left_alone(models, tmp_path, capsys):
    from harness.cli import main

    cfg = toy_config(tmp_path, models)
    train(cfg)
    assert main(["train", "--config", as_profile(cfg, tmp_path / "p.yaml")]) == 0
    assert "already finished" in capsys.readouterr().out


# --- a failed start blocks nothing ---------------------------------------------------------------------------
def test_model_source_typo_then_the_corrected_command_runs(models, tmp_path):
    typo = toy_config(tmp_path, models, model={"source": str(tmp_path / "Qwen2.5-7B-Instruc")})
    with pytest.raises(Exception, match="Qwen2.5-7B-Instruc"):
        train(typo)
    assert not typo.run_dir.exists() or not any(typo.run_dir.iterdir())
    run_dir = train(toy_config(tmp_path, models))  # neither --resume nor --force
    assert (run_dir / "done.json").exists()


def test_a_run_folder_without_checkpoint_is_restarted(models, tmp_path):
    cfg = toy_config(tmp_path, models)
    cfg.run_dir.mkdir(parents=True)
    (cfg.run_dir / "protocol.json").write_text(json.dumps({"sha256": "0" * 64, "config": {"seed": 7}}))
    (cfg.run_dir / "metrics.jsonl").write_text('{"step": 0, "train/success": 1.0}\n')
    run_dir = train(cfg)
    assert list(pd.read_csv(run_dir / "metrics.csv")["step"]) == [0, 1, 2]


def test_missing_vllm_fails_before_the_model_loads_and_leaves_no_running_mlflow_run(models, tmp_path, monkeypatch):
    model_dir = tmp_path / "Qwen2.5-7B-Instruct"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` fails, as on a machine without it

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the backend was checked")

    monkeypatch.setattr(harness.policy.source, "load_policy", no_model)
    monkeypatch.setattr(harness.policy.source, "build_tiny_model", no_model)
    cfg = toy_config(tmp_path, models, tracking=True, backend={"name": "vllm"}, model={"source": str(model_dir)})
    with pytest.raises(Exception, match="vllm") as err:
        train(cfg)
    assert "pip install" in str(err.value)
    _, runs = mlflow_runs(cfg)
    assert all(r.info.status != "RUNNING" for r in runs)
    assert not cfg.run_dir.exists() or not any(cfg.run_dir.iterdir())


# --- MLflow --------------------------------------------------------------------------------------------------
def test_force_replaces_the_earlier_mlflow_run(models, tmp_path):
    cfg = toy_config(tmp_path, models, tracking=True)
    train(cfg)
    first_id = (cfg.run_dir / "mlflow_run_id").read_text()
    train(cfg, force=True)
    client, runs = mlflow_runs(cfg)
    assert [r.info.status for r in runs] == ["FINISHED"]
    assert runs[0].info.run_id != first_id
    old = client.get_run(first_id)
    assert old.info.lifecycle_stage == "deleted" and old.data.tags["replaced_by"] == runs[0].info.run_id


def test_resume_continues_the_same_mlflow_run_and_logs_no_step_twice(models, tmp_path, monkeypatch):
    cfg = toy_config(tmp_path, models, tracking=True, train={"checkpoint_every": 2})
    real = kill_at_checkpoint(monkeypatch, 3)  # step 2 (and the eval at step 2) logged, then killed
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    run_id = (cfg.run_dir / "mlflow_run_id").read_text()
    monkeypatch.setattr(harness.engine.checkpoint, "save", real)
    train(cfg, resume=True)
    client, runs = mlflow_runs(cfg)
    assert [r.info.run_id for r in runs] == [run_id] and runs[0].info.status == "FINISHED"
    for key in ("train/success", "eval/success", "logp_gap"):
        steps = [m.step for m in client.get_metric_history(run_id, key)]
        assert len(steps) == len(set(steps)), (key, steps)
    assert sorted(m.step for m in client.get_metric_history(run_id, "train/success")) == [0, 1, 2]


def test_a_run_folder_moved_to_another_store_resumes_into_a_new_mlflow_run_filled_from_its_journal(
        models, tmp_path, monkeypatch, capsys):
    cfg = toy_config(tmp_path, models, tracking=True, train={"checkpoint_every": 2})
    real = kill_at_checkpoint(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    old_id = (cfg.run_dir / "mlflow_run_id").read_text()
    monkeypatch.setattr(harness.engine.checkpoint, "save", real)
    cfg.tracking.uri = f"sqlite:///{tmp_path}/another.db"  # the folder now logs to a store that never saw it
    train(cfg, resume=True)
    assert f"holds no MLflow run {old_id}" in capsys.readouterr().out
    client, runs = mlflow_runs(cfg)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED" and runs[0].info.run_id != old_id
    assert (cfg.run_dir / "mlflow_run_id").read_text() == runs[0].info.run_id
    assert sorted(m.step for m in client.get_metric_history(runs[0].info.run_id, "train/success")) == [0, 1, 2]


def test_a_finished_run_folder_copied_to_another_store_is_synced_into_a_run_of_its_own(models, tmp_path):
    from harness.records.backfill import sync
    from harness.records.tracking import experiment_name

    cfg = toy_config(tmp_path, models, tracking=True)
    train(cfg)
    old_id = (cfg.run_dir / "mlflow_run_id").read_text()
    cfg.tracking.uri = f"sqlite:///{tmp_path}/laptop.db"  # the folder, copied from the cluster, meets a new store
    report = sync(cfg.run_dir, cfg.tracking.uri)
    client, runs = mlflow_runs(cfg)
    assert len(runs) == 1 and runs[0].info.run_id == report["run_id"] != old_id
    assert runs[0].info.status == "FINISHED" and runs[0].info.run_name == cfg.name
    assert client.get_experiment(runs[0].info.experiment_id).name == experiment_name(cfg.profile, cfg.benchmark)
    steps = sorted(m.step for m in client.get_metric_history(report["run_id"], "train/success"))
    assert steps == list(range(cfg.train.steps))
    assert sync(cfg.run_dir, cfg.tracking.uri)["metrics_sent"] == 0  # a second sync sends nothing


# --- torn and corrupt files ----------------------------------------------------------------------------------
def test_torn_last_log_line_is_dropped_with_a_warning_and_the_run_resumes(models, tmp_path, monkeypatch):
    reference = train(toy_config(tmp_path / "ref", models, train={"checkpoint_every": 2}))
    cfg = toy_config(tmp_path / "torn", models, train={"checkpoint_every": 2})
    real = kill_at_checkpoint(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    with (cfg.run_dir / "metrics.jsonl").open("a") as journal:
        journal.write('{"step": 3, "train/succ')  # the write the kill cut short
    monkeypatch.setattr(harness.engine.checkpoint, "save", real)
    with pytest.warns(UserWarning, match="metrics.jsonl"):
        resumed = train(cfg, resume=True)
    pd.testing.assert_frame_equal(comparable_metrics(reference), comparable_metrics(resumed))


@pytest.mark.parametrize("damage", ["truncated", "random bytes"])
def test_corrupt_checkpoint_names_the_file_and_the_way_out_and_fails_the_mlflow_run(models, tmp_path, monkeypatch,
                                                                                    damage):
    cfg = toy_config(tmp_path, models, tracking=True)
    monkeypatch.setattr(harness.engine.trainer, "rl_step", _dies_at(2, harness.engine.trainer.rl_step))
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    client, (run,) = mlflow_runs(cfg)
    client.update_run(run.info.run_id, status="RUNNING")  # what a kill -9 leaves behind
    path = cfg.run_dir / "checkpoint.pt"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncated" else bytes(range(256)) * 64)
    with pytest.raises(Exception) as err:
        train(cfg, resume=True)
    message = str(err.value)
    assert str(path) in message and "--force" in message
    assert client.get_run(run.info.run_id).info.status == "FAILED"


def _dies_at(step_to_die, real):
    def rl_step(ctx, step):
        if step == step_to_die:
            raise KeyboardInterrupt("simulated kill")
        return real(ctx, step)

    return rl_step


def test_eval_of_a_finished_run_still_works_after_the_changes(models, tmp_path):
    """``harness eval`` opens a finished run's checkpoint read-only (no identity check, no MLflow run)."""
    from harness.engine.evaluate import evaluate_checkpoint

    cfg = toy_config(tmp_path, models)
    train(cfg)
    stamp = (cfg.run_dir / "done.json").stat().st_mtime_ns
    summary = evaluate_checkpoint(dataclasses.replace(cfg), str(tmp_path / "eval.csv"))
    assert 0.0 <= summary["success"] <= 1.0 and (cfg.run_dir / "done.json").stat().st_mtime_ns == stamp
