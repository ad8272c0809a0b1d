"""The engine's exact Gates success (harness/engine/evaluate.py: exact_success) against 2,000 episodes sampled by the
engine's own rollout from the same warm-started tiny model: within 3 standard errors, overall and per task. Two
colours only, so that the tiny model, trained in seconds, copies the doors and plays mid-range (~25%): every
factor of P(win) then shows (halls with detours, a real and a decoy gate, the step limit)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from envs.vector import VectorEnv
from harness.config import seeded_benchmark
from harness.core.seeding import Seeds
from harness.engine import rollout
from harness.engine.evaluate import exact_success
from harness.policy.backends.hf import HFBackend, sample_tokens
from harness.policy.precision import Precision
from harness.policy.sequence_prob import sampling_logprobs
from harness.policy.source import prepare_policy
from harness.policy.tokenizer import stop_token_ids
from harness.policy.warm_start import format_response
from tests.engine_helpers import toy_config

GATES = {"horizon": 2, "pivots": 1, "decoys": 1, "alarm_delay": 1, "choices": 2, "colours": 2, "slack": 2,
         "train_panel_size": 40, "eval_panel_size": 8}
EPISODES_PER_TASK = 250  # 8 tasks: 2,000 episodes


@pytest.fixture
def one_thread():
    """One intra-op thread, as the runs use (train.cpu_threads): two threads spinning on a loaded 2-core machine
    took this test from 15 to 100 CPU-s."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_exact_success_matches_sampled_episodes(tmp_path, one_thread):
    cfg = toy_config(tmp_path, benchmark="gates", gates=GATES, eval={"temperature": 0.4, "panel_size": 8},
                     model={"tiny_vocab": 512, "tiny_hidden": 64, "warm_start_demos": 40, "warm_start_epochs": 8},
                     rollout={"generation_batch": 4096, "history_length": 0})
    benchmark = seeded_benchmark(cfg, Seeds.from_master(0))
    policy, tokenizer, _ = prepare_policy(cfg, benchmark, "cpu", log=lambda *_: None)
    tasks = list(benchmark.panel("eval_out", 8).tasks)
    ctx = SimpleNamespace(cfg=cfg, model=policy, tokenizer=tokenizer, precision=Precision("float32", "cpu"),
                          benchmark=benchmark, eval_panel=SimpleNamespace(tasks=tasks))
    exact = exact_success(ctx)

    backend = HFBackend(policy, tokenizer, "cpu", batch_size=4096)
    trajs = rollout.collect(backend, benchmark, VectorEnv(benchmark.make_env, num_workers=0), tasks,
                            group_size=EPISODES_PER_TASK, rollout_cfg=cfg.rollout, max_steps=benchmark.max_steps,
                            temperature=cfg.eval.temperature, seed=7)
    sampled = [sum(t.won for t in trajs if t.task is task) / EPISODES_PER_TASK for task in tasks]
    mean_exact, mean_sampled = sum(exact) / len(exact), sum(sampled) / len(sampled)
    # the sampled mean's standard error: every task rolled out EPISODES_PER_TASK times (a stratified sample)
    se = (sum(p * (1 - p) for p in exact) / len(exact) ** 2 / EPISODES_PER_TASK) ** 0.5
    print(f"exact {mean_exact:.4f} sampled {mean_sampled:.4f} (2,000 episodes, se {se:.4f})")
    assert 0.1 < mean_exact < 0.9, "the policy must play mid-range for the comparison to test every factor"
    assert abs(mean_sampled - mean_exact) < 3 * se
    for p, rate in zip(exact, sampled):
        assert abs(rate - p) < 3.5 * max((p * (1 - p) / EPISODES_PER_TASK) ** 0.5, 0.004), (exact, sampled)

    # the exact number counts only the taught response: how often did a valid turn say its action otherwise?
    other = [turn for traj in trajs for turn in traj.turns if turn.action_valid and not _taught(turn, tokenizer, cfg)]
    valid = sum(turn.action_valid for traj in trajs for turn in traj.turns)
    assert len(other) <= 0.001 * valid, [turn.response_text for turn in other[:5]]


def _taught(turn, tokenizer, cfg) -> bool:
    """The response is the taught one's tokens, then a stop token (or the response limit came first)."""
    ids = tokenizer(format_response(turn.action, think=False), add_special_tokens=False)["input_ids"]
    if len(ids) >= cfg.rollout.max_response_tokens:
        return turn.response_ids == ids
    return turn.response_ids[:-1] == ids and turn.response_ids[-1] in stop_token_ids(tokenizer)


@pytest.mark.parametrize(("temperature", "top_p"), [(0.4, 1.0), (1.0, 0.7), (0.0, 1.0)])
def test_sampling_logprobs_are_the_samplers_distribution(temperature, top_p):
    """The scorer's per-token distribution is the one the hf backend draws from (tempering, nucleus, greedy)."""
    logits = torch.tensor([[2.0, 1.5, 0.3, -1.0, 0.9]])
    generator = torch.Generator().manual_seed(0)
    draws = 20_000
    tokens = sample_tokens(logits.expand(draws, -1), temperature, top_p, generator)[0]
    frequency = torch.bincount(tokens, minlength=5).double() / draws
    expected = sampling_logprobs(logits, temperature, top_p)[0].double().exp()
    assert torch.allclose(expected.sum(), torch.tensor(1.0, dtype=torch.float64))
    assert torch.allclose(frequency, expected, atol=4 * (0.25 / draws) ** 0.5)
