"""The teacher's premise: its context fits its prompt limit (or the run refuses to start), and the per-step
informativeness metrics, computed from the batch alone."""
from __future__ import annotations

import math

import pytest
import torch
from synthetic import batch_from_rows

from envs.base import make_benchmark
from harness.config import load_config
from harness.core import registry
from harness.core.typed import ConfigError
from harness.engine.teacher import PremiseMonitor, premise_metrics
from harness.engine.teacher_budget import check_teacher_budget, context_tokens_needed, worst_case_context
from tests.profiles import CONFIG_DIR

PROFILES = ("cpu", "tiny", "smol", "smoke", "paper", "paper_lora", "paper_1p5b")
TEACHERS = sorted({cls.teacher for cls in map(registry.get, registry.available()) if cls.teacher is not None})


def _runs(profile: str):
    cfg = load_config(CONFIG_DIR / f"{profile}.yaml")
    for bench in sorted(set(cfg.grid.benchmarks) | {cfg.benchmark}):
        run = load_config(CONFIG_DIR / f"{profile}.yaml", [f"benchmark={bench}"])
        yield run, make_benchmark(bench, run.benchmark_config, think=run.rollout.think)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_shipped_profile_fits_its_teacher_contexts(profile):
    """At one token a byte (an upper bound for byte-level BPE): no teacher row of a shipped profile is cut."""
    assert TEACHERS == registry.TEACHER_CONTEXTS.available()
    for cfg, benchmark in _runs(profile):
        for teacher in TEACHERS:
            needed = check_teacher_budget(cfg, benchmark, teacher)  # raises when it does not fit
            assert 0 < needed <= cfg.rollout.teacher_context_tokens


def test_a_budget_too_small_refuses_to_start_naming_the_key():
    cfg = load_config(CONFIG_DIR / "paper.yaml", ["rollout.teacher_context_tokens=512", "method=sharpo"])
    benchmark = make_benchmark("alfworld", cfg.benchmark_config, think=True)
    needed, _ = context_tokens_needed(benchmark, "successful_sibling")
    with pytest.raises(ConfigError, match=rf"rollout.teacher_context_tokens={needed} or more"):
        check_teacher_budget(cfg, benchmark, "successful_sibling")
    assert check_teacher_budget(cfg, benchmark, None) is None  # GRPO has no teacher: nothing to fit


def test_a_budget_too_small_refuses_before_weights_load(tmp_path, monkeypatch):
    from harness.engine import run
    from tests.engine_helpers import toy_config

    monkeypatch.setattr(run, "prepare_policy", lambda *a, **k: pytest.fail("weights loaded before the check"))
    cfg = toy_config(tmp_path, method="sharpo", model={"source": str(tmp_path / "no-tokenizer")},
                     rollout={"teacher_context_tokens": 8})
    monkeypatch.setattr(run, "check_start_up", lambda *a, **k: None)  # the model folder is not the point here
    with pytest.raises(ConfigError, match="rollout.teacher_context_tokens"):
        run.open_run(cfg)


def test_worst_case_context_is_the_alfworld_50_step_sibling_list():
    benchmark = make_benchmark("alfworld", load_config(CONFIG_DIR / "paper.yaml").benchmark_config)
    bounds = benchmark.text_bounds()
    sibling = worst_case_context(benchmark, "successful_sibling")
    assert sibling.count(bounds.action) == 50
    assert bounds.observation in worst_case_context(benchmark, "hindsight")


def test_gates_bounds_cover_every_text_of_an_episode():
    from envs.gates import GatesConfig

    benchmark = make_benchmark("gates", GatesConfig(horizon=8, pivots=3, key_at_gates=True))
    bounds, env = benchmark.text_bounds(), benchmark.make_env()
    for task in benchmark.panel("eval_out").tasks[:50]:
        obs = env.reset(task)
        for action in obs.admissible_actions:
            assert len(action) <= len(bounds.action)
            env.reset(task)
            assert len(env.step(action).observation.text) <= len(bounds.observation)


def _premise_batch():
    """Group 0: a won rollout (δ +1 on 2 tokens, +3 on 1 token) and a lost one (δ −2); group 1: no context."""
    rows = [dict(group=0, traj=0, step=0, ret=1.0, tokens=2, gap=1.0),
            dict(group=0, traj=0, step=1, ret=1.0, tokens=1, gap=3.0),
            dict(group=0, traj=1, step=0, ret=0.0, tokens=2, gap=-2.0),
            dict(group=1, traj=2, step=0, ret=0.0, tokens=2, gap=5.0, avail=False)]
    return batch_from_rows(rows)


def test_premise_metrics_on_a_synthetic_batch():
    batch = _premise_batch()
    metrics = premise_metrics(batch.teacher_logp, batch.old_logp, batch.response_mask, batch.teacher_available,
                              batch.success, truncated=1)
    assert metrics["teacher/gap_success"] == pytest.approx((1 + 1 + 3) / 3)  # per token, over the won rows
    assert metrics["teacher/gap_failure"] == pytest.approx(-2.0)  # the row without a context is left out
    assert metrics["teacher/better_frac"] == pytest.approx(2 / 3)
    assert metrics["teacher/available_frac"] == pytest.approx(3 / 4)
    assert metrics["teacher/truncated_frac"] == pytest.approx(1 / 3)
    none_lost = premise_metrics(batch.teacher_logp[:2], batch.old_logp[:2], batch.response_mask[:2],
                                batch.teacher_available[:2], batch.success[:2])
    assert math.isnan(none_lost["teacher/gap_failure"]) and none_lost["teacher/truncated_frac"] == 0.0


def test_the_run_warns_when_the_teacher_is_not_better_on_successes():
    monitor = PremiseMonitor()
    assert monitor.update({"teacher/gap_success": 0.5, "teacher/gap_failure": -0.5}) is None
    assert monitor.update({"teacher/gap_success": float("nan"), "teacher/gap_failure": 0.2}) is None
    warning = monitor.update({"teacher/gap_success": -2.0, "teacher/gap_failure": 0.1})  # means: −0.75 vs −0.07
    assert warning and "teacher uninformative" in warning
    assert monitor.update({"teacher/gap_success": -1.0, "teacher/gap_failure": 0.0}) is None  # said once


def test_truncated_rows_are_counted_against_the_teacher_limit(monkeypatch):
    """A teacher prompt keeps max_prompt_tokens + context_tokens tokens; a longer one is cut and counted."""
    import harness.engine.teacher as teacher_module
    from harness.engine.rollout import Trajectory, Turn
    from tests.toy_benchmark import DoorBenchmark

    class Tokenizer:  # one token per character: enough for the limit arithmetic
        pad_token_id = 0

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return messages[0]["content"]

        def __call__(self, texts, add_special_tokens):
            return {"input_ids": [[1] * len(t) for t in texts]}

    seen = []
    monkeypatch.setattr(teacher_module, "response_logprobs",
                        lambda model, ids, mask, response_ids, *a, **k: seen.append(ids.shape[1]) or
                        torch.zeros(response_ids.shape))
    task = DoorBenchmark(DoorBenchmark.Config()).panel("train").tasks[0]
    trajs = [Trajectory(task, 0, i, turns=[Turn("x" * 20, [], [], [], "", "open door", True, "", "", 0.0)], won=True)
             for i in range(2)]
    batch = batch_from_rows([dict(group=0, traj=i, step=0, ret=1.0) for i in range(2)])
    batch = batch.with_columns(response_ids=torch.ones(batch.response_mask.shape, dtype=torch.long))
    scorer = teacher_module.TeacherScorer(torch.nn.Linear(1, 1), Tokenizer(), "toy", max_prompt_tokens=20,
                                          context_tokens=10)
    for lengths, expected in (((10, 10), 0.0), ((10, 11), 0.5)):
        _, metrics = scorer.score(batch, trajs, "skills", builder=lambda t, b: ["c" * n for n in lengths])
        assert metrics["teacher/truncated_frac"] == expected
        assert seen[-1] == 30  # the limit: 20 + 10
