"""Infrastructure failures are not outcomes (docs/recovery.md): an episode an env crash ended leaves the step batch
(its turns get no advantage and no share in its group's statistics), is counted in train/env_failure_frac, is
retried once in evaluation, and too many of them stop the run with the worker's traceback."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
import torch

import harness.engine.trainer as trainer
from envs.base import BENCHMARKS
from harness.core.ranges import Checked
from harness.engine import rollout
from harness.engine.evaluate import evaluate
from harness.engine.failures import EnvFailureError
from harness.engine.run import open_run
from harness.engine.update import score
from methods._segments import dense_ids, group_mean_std
from tests.engine_helpers import toy_config
from tests.toy_benchmark import DoorBenchmark, DoorEnv

_created = itertools.count()


class JammingDoorEnv(DoorEnv):
    """The door game; the env built ``crash_envs``-th in this process jams: its first action never ends the
    episode and its second raises (so the failed episode has exactly one turn)."""

    def __init__(self, jams: bool):
        self.jams = jams

    def step(self, action):
        result = super().step(action)
        if not self.jams:
            return result
        if self.steps >= 2:
            raise RuntimeError("door jammed on purpose")
        return type(result)(self._observation("The door rattles."), 0.0, False, {"won": False, "action_valid": True})


@dataclass
class JamConfig(Checked):
    train_tasks: int = field(default=16, metadata={"help": "train tasks", "range": ">= 1"})
    crash_envs: list[int] = field(default_factory=list, metadata={
        "help": "which env instances jam (build order)", "range": ">= 0"})


@BENCHMARKS.register("toy_jam")
class JammingDoorBenchmark(DoorBenchmark):
    Config = JamConfig

    def make_env(self):
        return JammingDoorEnv(next(_created) in self.config.crash_envs)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def jam_config(tmp_path, models, crash_envs, **sections):
    return toy_config(tmp_path, models, benchmark="toy_jam", toy_jam={"crash_envs": crash_envs}, **sections)


def opened(cfg):
    """The run opened (a tiny model's warm start builds envs too); its envs are numbered from 0 from here."""
    global _created
    ctx = open_run(cfg)
    _created = itertools.count()
    return ctx


def _spy(monkeypatch, ctx) -> dict:
    seen, real_collect, real_advantages = {}, rollout.collect, ctx.method.advantages

    def collect(*args, **kwargs):
        seen["trajs"] = real_collect(*args, **kwargs)
        return seen["trajs"]

    def advantages(batch, step=0):
        seen["batch"], (seen["adv"], diagnostics) = batch, real_advantages(batch, step)
        return seen["adv"], diagnostics

    monkeypatch.setattr(rollout, "collect", collect)
    monkeypatch.setattr(ctx.method, "advantages", advantages)
    return seen


def test_a_crashed_episode_gets_no_advantage_and_no_share_in_its_group(models, tmp_path, monkeypatch):
    ctx = opened(jam_config(tmp_path, models, crash_envs=[3], eval={"at_start": False}))
    try:
        seen = _spy(monkeypatch, ctx)
        metrics = trainer.rl_step(ctx, 0)
    finally:
        ctx.close("FINISHED")
    trajs, batch = seen["trajs"], seen["batch"]
    failed = [t for t in trajs if t.failure_reason]
    assert [t.traj_id for t in failed] == [3] and len(failed[0].turns) == 1  # group 1's first rollout, one turn
    assert "door jammed on purpose" in failed[0].failure_reason
    assert metrics["train/env_failure_frac"] == pytest.approx(1 / 6)
    assert 3 not in batch.traj_id.tolist()  # its turn is in no row: advantage 0, no loss, no KL
    assert batch.num_rows == sum(len(t.turns) for t in trajs) - 1
    # group 1's statistics are those of its two completed episodes
    index, n = dense_ids(batch.group_id)
    mean, std, count = group_mean_std(batch.episode_return.double(), index, n)
    rows = batch.group_id == 1
    done = [t.episode_return for t in trajs if t.group_id == 1 and not t.failure_reason]
    first = int(torch.nonzero(rows)[0])
    assert set(batch.traj_id[rows].tolist()) == {4, 5}
    assert mean[index[first]] == pytest.approx(sum(done) / 2)
    # the advantages are the method's on the batch of completed episodes alone
    completed = [t for t in trajs if not t.failure_reason]
    alone = rollout.to_step_batch(completed, ctx.tokenizer.pad_token_id)
    alone = alone.with_columns(old_logp=score(ctx.model, alone, 8, "cpu"))
    assert torch.equal(ctx.method.__class__.advantages(ctx.method, alone, 0)[0], seen["adv"])
    assert count.sum() == batch.num_rows and std.shape == mean.shape


def test_too_many_failures_stop_the_run_naming_the_traceback(models, tmp_path):
    ctx = opened(jam_config(tmp_path, models, crash_envs=[3], rollout={"max_failure_frac": 0.1}))
    try:
        with pytest.raises(EnvFailureError, match=r"(?s)1 of 6 episodes.*max_failure_frac=0.1.*Traceback.*jammed"):
            trainer.rl_step(ctx, 0)
    finally:
        ctx.close("FAILED")


def test_an_eval_episode_that_fails_is_retried_once_and_then_counted_apart(models, tmp_path):
    ctx = opened(jam_config(tmp_path / "once", models, crash_envs=[0]))
    try:
        summary = evaluate(ctx, 0)
        rows = ctx.eval_log.rows()
    finally:
        ctx.close("FINISHED")
    assert summary["env_failures"] == 0 and [r["retried"] for r in rows] == [1, 0]
    assert all(r["failure_reason"] == "" for r in rows)

    ctx = opened(jam_config(tmp_path / "twice", models, crash_envs=[0, 2]))  # the retry's env jams too
    try:
        summary = evaluate(ctx, 0)
        rows = ctx.eval_log.rows()
    finally:
        ctx.close("FINISHED")
    assert summary["env_failures"] == 1 and "door jammed" in rows[0]["failure_reason"]
    assert summary["success"] == rows[1]["success"]  # the rate is over the episode that ran to its end


def test_the_tables_leave_failed_episodes_out_of_the_rates_and_count_them(tmp_path):
    import json

    import pandas as pd

    from paper_figures.load import read_run

    run = tmp_path / "toy" / "grpo" / "seed0"
    run.mkdir(parents=True)
    (run / "done.json").write_text(json.dumps({"benchmark": "toy", "method": "grpo", "seed": 0, "steps": 2}))
    rows = [(0, 0, ""), (2, 1, ""), (2, 0, ""), (2, 0, "RuntimeError: door jammed")]
    pd.DataFrame([{"step": s, "task_id": f"t{i}", "task_type": "door", "success": won, "score": won, "return": won,
                   "length": 1, "failure_reason": why} for i, (s, won, why) in enumerate(rows)]).to_csv(
        run / "eval.csv", index=False)
    row, evals, _ = read_run(run)
    assert row["success"] == 0.5 and row["env_failures"] == 1  # 1 of the 2 episodes that ran, not 1 of 3
    assert len(evals[evals["final"]]) == 2
