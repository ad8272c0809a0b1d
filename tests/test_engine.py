"""Engine tests on the toy door benchmark and a tiny model: determinism, resume, teacher pass, tracking."""
from __future__ import annotations

import json

import pytest
import torch

import harness.engine.teacher
import harness.engine.trainer
import harness.teacher_contexts
from harness.engine import rollout
from harness.engine.run import open_run
from harness.engine.trainer import train
from harness.engine.update import score
from tests.engine_helpers import assert_same_logs, comparable_metrics, killed_then_resumed, toy_config


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """One tiny-model cache for the module: the model is built once, every test starts from it."""
    return tmp_path_factory.mktemp("models")


def test_same_seed_twice_gives_identical_metrics(models, tmp_path):
    first = train(toy_config(tmp_path / "a", models))
    second = train(toy_config(tmp_path / "b", models))
    assert_same_logs(first, second)
    done = json.loads((first / "done.json").read_text())
    assert done["steps"] == 3 and 0.0 <= done["final_eval"]["success"] <= 1.0
    # the toy benchmark labels no turn: no credit score (docs/credit.md)
    assert not [c for c in comparable_metrics(first).columns if c.startswith("credit/")]


def test_different_seeds_differ(models, tmp_path):
    a = comparable_metrics(train(toy_config(tmp_path / "a", models)))
    b = comparable_metrics(train(toy_config(tmp_path / "b", models, seed=1)))
    assert not a.equals(b)


def test_kill_and_resume_matches_uninterrupted_run(models, tmp_path, monkeypatch):
    reference = train(toy_config(tmp_path / "ref", models, method="sharpo"))
    resumed = killed_then_resumed(toy_config(tmp_path / "killed", models, method="sharpo"), monkeypatch)
    assert_same_logs(reference, resumed)


def test_finished_run_is_not_overwritten(models, tmp_path, capsys):
    cfg = toy_config(tmp_path, models)
    run_dir = train(cfg)
    stamp = (run_dir / "done.json").stat().st_mtime_ns
    train(cfg)
    assert (run_dir / "done.json").stat().st_mtime_ns == stamp
    assert "already finished" in capsys.readouterr().out


def _rollout_batch(ctx):
    trajs = rollout.collect(ctx.backend, ctx.benchmark, ctx.envs, list(ctx.train_panel.tasks[:2]), group_size=2,
                            rollout_cfg=ctx.cfg.rollout, max_steps=4, temperature=1.0, seed=3)
    batch = rollout.to_step_batch(trajs, ctx.tokenizer.pad_token_id)
    return trajs, batch.with_columns(old_logp=score(ctx.model, batch, 8, "cpu"))


def test_ppo_update_raises_positive_and_lowers_negative_advantage_rows(models, tmp_path):
    """The sign chain rollout → batch → loss → optimiser: rows with A > 0 gain log-prob, rows with A < 0 lose it."""
    from harness.engine.update import ppo_update

    ctx = open_run(toy_config(tmp_path, models, train={"kl_coef": 0.0}))
    _, batch = _rollout_batch(ctx)
    signs = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(batch.num_rows)])
    advantages = signs[:, None] * batch.response_mask
    ppo_update(ctx.model, ctx.optimizer, ctx.accelerator, batch, advantages, ctx.method, ctx.cfg.train, 0, 0)
    change = ((score(ctx.model, batch, 8, "cpu") - batch.old_logp) * batch.response_mask).sum(1)
    assert change[signs > 0].mean() > 0 > change[signs < 0].mean()
    ctx.close("FINISHED")


def test_teacher_with_empty_context_equals_student_logp(models, tmp_path):
    ctx = open_run(toy_config(tmp_path, models, method="sharpo"))
    trajs, batch = _rollout_batch(ctx)
    empty = lambda trajs, benchmark: ["" for t in trajs for _ in t.turns]  # noqa: E731
    scored, _ = ctx.teacher.score(batch, trajs, "skills", builder=empty)
    assert scored.teacher_available.all()
    torch.testing.assert_close(scored.teacher_logp, batch.old_logp, atol=1e-5, rtol=0)
    ctx.close("FINISHED")


def test_teacher_scores_exactly_the_student_response_tokens(models, tmp_path, monkeypatch):
    ctx = open_run(toy_config(tmp_path, models, method="sharpo"))
    trajs, batch = _rollout_batch(ctx)
    seen = {}
    real = harness.engine.teacher.response_logprobs

    def spy(model, prompt_ids, prompt_mask, response_ids, response_mask, **kw):
        seen["response_ids"], seen["response_mask"], seen["prompt_ids"] = response_ids, response_mask, prompt_ids
        return real(model, prompt_ids, prompt_mask, response_ids, response_mask, **kw)

    monkeypatch.setattr(harness.engine.teacher, "response_logprobs", spy)
    scored, metrics = ctx.teacher.score(batch, trajs, "skills")
    # token alignment: the teacher scored the very response ids of the student's rows, under a longer prompt
    assert torch.equal(seen["response_ids"], batch.response_ids)
    assert torch.equal(seen["response_mask"], batch.response_mask)
    assert seen["prompt_ids"].shape[1] > batch.prompt_ids.shape[1]
    assert metrics["teacher/available_frac"] == 1.0 and metrics["teacher/truncated_frac"] == 0.0
    assert not torch.allclose(scored.teacher_logp, batch.old_logp)  # the context changes the log-probs
    ctx.close("FINISHED")


def test_successful_sibling_context_prefers_another_rollout():
    from tests.toy_benchmark import DoorBenchmark

    task = DoorBenchmark(DoorBenchmark.Config()).panel("train").tasks[0]
    turn = rollout.Turn("p", [1], [2], [0.0], "", "take red key", True, "o", "o2", 0.0)
    winner_a = rollout.Trajectory(task, 0, 0, turns=[turn], won=True)
    winner_b = rollout.Trajectory(task, 0, 1, turns=[turn.__class__(**{**turn.__dict__, "action": "open door"})],
                                  won=True)
    loser = rollout.Trajectory(task, 1, 2, turns=[turn], won=False)
    contexts = harness.teacher_contexts.sibling_contexts([winner_a, winner_b, loser], "toy")
    assert "open door" in contexts[0] and "take red key" in contexts[1]
    assert contexts[2] is None  # group 1 has no success: no teacher, the method falls back to GRPO


@pytest.mark.parametrize("method,expects_teacher", [("grpo", False), ("gigpo", False), ("rlsd", True), ("hgpo", False),
                                                    ("agentopsd", True)])
def test_teacher_forward_runs_only_when_the_method_needs_it(models, tmp_path, monkeypatch, method, expects_teacher):
    calls = []
    real = harness.engine.teacher.response_logprobs
    monkeypatch.setattr(harness.engine.teacher, "response_logprobs", lambda *a, **k: calls.append(1) or real(*a, **k))
    train(toy_config(tmp_path, models, method=method, train={"steps": 1}))
    assert bool(calls) == expects_teacher


def test_a_step_logs_the_tokens_it_processed_and_the_protocol_the_machine(models, tmp_path):
    """cost/tokens counts what the step read (harness/engine/cost.py: the student's tokens over every pass, the
    teacher's over its pass), the count the compute-matched arm is planned with; protocol.json names the CPU
    instruction set, outside the protocol hash."""
    from harness.engine.cost import student_passes
    from harness.records.protocol import protocol_hash

    cfg = toy_config(tmp_path, models, method="rlsd", train={"steps": 1})
    run_dir = train(cfg)
    row = comparable_metrics(run_dir).iloc[0]
    assert row["cost/teacher_tokens"] > row["train/tokens"] > 0  # the privileged prompt is longer
    assert row["cost/tokens"] == student_passes(cfg) * row["train/tokens"] + row["cost/teacher_tokens"]
    assert row["actor/optimizer_steps"] == -(-row["train/rows"] // cfg.train.ppo_mini_batch)
    protocol = json.loads((run_dir / "protocol.json").read_text())
    assert protocol["machine"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    moved = {**protocol, "machine": {**protocol["machine"], "cpu_capability": "another"}}
    assert protocol_hash(moved) == protocol["sha256"]


def test_bad_config_fails_before_any_model_loads(models, tmp_path, monkeypatch, capsys):
    import harness.policy.models
    import harness.policy.source
    from harness.cli import main

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")

    for module in (harness.policy.models, harness.policy.source):
        monkeypatch.setattr(module, "load_policy", no_model, raising=False)
        monkeypatch.setattr(module, "build_tiny_model", no_model, raising=False)
    assert main(["train", "--config", "config/smoke.yaml", "method.lamda=0.1", "method=sharpo"]) == 2
    err = capsys.readouterr().err
    assert "lamda" in err and "lam" in err
    assert main(["train", "--config", "config/smoke.yaml", "train.loss_agg_mode=mean"]) == 2
    assert "token-mean" in capsys.readouterr().err


def test_mlflow_holds_params_metrics_and_protocol(models, tmp_path):
    from mlflow.tracking import MlflowClient

    cfg = toy_config(tmp_path, models, tracking=True, method="sharpo")
    run_dir = train(cfg)
    client = MlflowClient(tracking_uri=cfg.tracking.uri)
    run = client.get_run((run_dir / "mlflow_run_id").read_text())
    assert run.info.run_name == "sharpo-toy-seed0" and run.info.status == "FINISHED"
    assert run.data.params["method.name"] == "sharpo" and run.data.params["rollout.group_size"] == "3"
    assert {"train/success", "logp_gap", "method/multiplier_mean", "eval/success"} <= set(run.data.metrics)
    assert run.data.tags["protocol_sha256"] == json.loads((run_dir / "protocol.json").read_text())["sha256"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"protocol.json", "metrics.csv", "eval.csv"} <= artifacts
