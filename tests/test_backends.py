"""The hf generation backend and the batched log-prob scorer."""
from __future__ import annotations

import random

import pytest
import torch
from tiny_corpus import build_and_load, one_torch_thread, prompt, response  # noqa: F401

from harness.config_sections import BackendConfig
from harness.core.plugins import UnknownPluginError
from harness.policy.backends import Generation, GenerationBackend, make_backend
from harness.policy.backends.hf import HFBackend, sample_tokens
from harness.policy.logprobs import pad_left, pad_right, response_logprobs
from harness.policy.tokenizer import chat_prompt_ids, end_of_turn_id
from harness.policy.warm_start import warm_start

SAMPLING = dict(temperature=1.0, top_p=1.0, max_new_tokens=12, max_prompt_tokens=512)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return build_and_load(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="module")
def prompts():
    rng = random.Random(3)
    return [prompt(rng, sentences=rng.randint(1, 12)) for _ in range(6)]  # varied lengths -> left padding


def rescore(model, tokenizer, gens: list[Generation], temperature: float) -> torch.Tensor:
    prompt_ids, prompt_mask = pad_left([g.prompt_ids for g in gens], tokenizer.pad_token_id)
    response_ids, response_mask = pad_right([g.response_ids for g in gens], tokenizer.pad_token_id)
    with torch.no_grad():
        return response_logprobs(model, prompt_ids, prompt_mask, response_ids, response_mask, micro_batch=4,
                                 temperature=temperature)


def test_make_backend_builds_hf_and_rejects_unknown_names(policy):
    model, tokenizer = policy
    backend = make_backend(BackendConfig(name="hf"), model, tokenizer, "cpu")
    assert isinstance(backend, HFBackend) and isinstance(backend, GenerationBackend)
    backend.sync_weights(model)  # shares the module: nothing to push
    with pytest.raises(ValueError, match="same module"):
        backend.sync_weights(torch.nn.Linear(1, 1))
    with pytest.raises(UnknownPluginError, match="unknown backend 'sglang'; known: hf, vllm"):
        make_backend(BackendConfig(name="sglang"), model, tokenizer, "cpu")


def test_generation_is_deterministic_per_seed(policy, prompts):
    backend = HFBackend(*policy)
    first = backend.generate(prompts, **SAMPLING, seed=5)
    again = backend.generate(prompts, **SAMPLING, seed=5)
    other = backend.generate(prompts, **SAMPLING, seed=6)
    assert [g.response_ids for g in first] == [g.response_ids for g in again]
    assert [g.logprobs for g in first] == [g.logprobs for g in again]
    assert [g.response_ids for g in first] != [g.response_ids for g in other]
    assert all(len(g.logprobs) == len(g.response_ids) for g in first)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 1.0), (0.7, 0.9), (0.0, 1.0)])
def test_backend_logprobs_equal_recomputed_logprobs(policy, prompts, temperature, top_p):
    model, tokenizer = policy
    gens = HFBackend(model, tokenizer, batch_size=5).generate(  # duplicates share one prefill
        prompts + prompts[:3], **{**SAMPLING, "temperature": temperature, "top_p": top_p}, seed=0)
    scored = rescore(model, tokenizer, gens, temperature or 1.0)
    rollout = torch.zeros_like(scored)
    for i, g in enumerate(gens):
        rollout[i, :len(g.logprobs)] = torch.tensor(g.logprobs)
    assert torch.allclose(scored, rollout, atol=1e-4), (scored - rollout).abs().max()


def test_rows_with_the_same_prompt_sample_independently(policy, prompts):
    gens = HFBackend(*policy).generate([prompts[0]] * 8, **SAMPLING, seed=0)
    assert len({tuple(g.response_ids) for g in gens}) > 1
    assert all(g.prompt_ids == gens[0].prompt_ids for g in gens)


def test_long_prompts_are_left_truncated(policy):
    model, tokenizer = policy
    long_prompt = prompt(random.Random(0), sentences=60)
    (full,) = chat_prompt_ids(tokenizer, [long_prompt])
    assert len(full) > 100
    (gen,) = HFBackend(model, tokenizer).generate([long_prompt], **{**SAMPLING, "max_prompt_tokens": 100}, seed=0)
    assert gen.prompt_ids == full[-100:]  # the end (with the generation prompt) is kept


def test_generation_stops_at_end_of_turn_and_strips_it_from_the_text(tmp_path):
    model, tokenizer = build_and_load(tmp_path / "tiny")
    rng = random.Random(0)
    demos = [(prompt(rng, sentences=2), "open drawer 2") for _ in range(4)]
    warm_start(model, tokenizer, demos, epochs=20, lr=1e-2, seed=0, batch_size=4)
    gens = HFBackend(model, tokenizer).generate([p for p, _ in demos], **{**SAMPLING, "max_new_tokens": 40,
                                                                          "temperature": 0.0}, seed=0)
    eot = end_of_turn_id(tokenizer)
    assert [g.text for g in gens] == [r for _, r in demos]  # memorised, then stopped
    assert all(g.response_ids[-1] == eot and not g.truncated for g in gens)
    (cut,) = HFBackend(model, tokenizer).generate([demos[0][0]], **{**SAMPLING, "max_new_tokens": 2,
                                                                     "temperature": 0.0}, seed=0)
    assert cut.truncated and cut.response_ids == gens[0].response_ids[:2]


def test_response_logprobs_ignore_padding_and_zero_it(policy):
    model, tokenizer = policy
    rng = random.Random(1)
    prompts = chat_prompt_ids(tokenizer, [prompt(rng, sentences=1), prompt(rng, sentences=9)])
    responses = [tokenizer(response(rng), add_special_tokens=False)["input_ids"] for _ in range(2)]
    responses[0] = responses[0][:3]
    prompt_ids, prompt_mask = pad_left(prompts, tokenizer.pad_token_id)
    response_ids, response_mask = pad_right(responses, tokenizer.pad_token_id, width=len(responses[1]) + 4)
    with torch.no_grad():
        together = response_logprobs(model, prompt_ids, prompt_mask, response_ids, response_mask, micro_batch=2)
        alone = response_logprobs(model, *pad_left(prompts[:1], 0), *pad_right(responses[:1], 0), micro_batch=1)
    assert together.shape == response_ids.shape
    assert torch.allclose(together[0, :3], alone[0], atol=1e-5)  # padding changes nothing
    assert (together[~response_mask] == 0).all() and (together[response_mask] < 0).all()


def test_response_logprobs_are_differentiable_at_a_temperature(policy):
    model, tokenizer = policy
    prompt_ids, prompt_mask = pad_left(chat_prompt_ids(tokenizer, ["go to fridge 1", "open it"]), 0)
    response_ids, response_mask = pad_right([[5, 6, 7], [8]], 0)
    logp = response_logprobs(model, prompt_ids, prompt_mask, response_ids, response_mask, micro_batch=1,
                             temperature=0.5)
    logp.sum().backward()
    grad = model.model.embed_tokens.weight.grad
    assert grad is not None and grad.abs().sum() > 0
    model.zero_grad(set_to_none=True)


def test_sampler_draws_from_the_tempered_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).expand(20000, 4)
    generator = torch.Generator().manual_seed(0)
    tokens, logp = sample_tokens(logits, 1.0, 1.0, generator)
    freq = torch.bincount(tokens, minlength=4) / len(tokens)
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.15, 0.05]), atol=0.015)
    assert torch.allclose(logp, logits.gather(1, tokens[:, None]).squeeze(1), atol=1e-6)
    tokens, _ = sample_tokens(logits, 1.0, 0.75, generator)  # nucleus = {0, 1}, renormalised 5/8, 3/8
    freq = torch.bincount(tokens, minlength=4) / len(tokens)
    assert torch.allclose(freq, torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=0.015)
    tokens, _ = sample_tokens(logits, 0.25, 1.0, generator)  # p^4 renormalised: 0.5^4 / sum = 0.81
    assert abs((tokens == 0).float().mean().item() - 0.5**4 / (0.5**4 + 0.3**4 + 0.15**4 + 0.05**4)) < 0.015


def test_bad_sampling_arguments_are_named(policy):
    backend = HFBackend(*policy)
    with pytest.raises(ValueError, match="top_p"):
        backend.generate(["x"], **{**SAMPLING, "top_p": 0.0}, seed=0)
    with pytest.raises(ValueError, match="temperature"):
        backend.generate(["x"], **{**SAMPLING, "temperature": -1.0}, seed=0)


class EchoBackend:
    """A backend module of its own (this test file), known to the engine by one line in ``BACKENDS``."""

    @classmethod
    def from_config(cls, cfg, model, tokenizer, device, precision=None):
        return cls()


def test_a_new_backend_is_its_module_plus_one_registration_line(request):
    from harness.config import config_from_dict
    from harness.config_sections import BackendConfig
    from harness.core.typed import ConfigError
    from harness.policy import backends

    backends.BACKENDS.add("echo", f"{__name__}:EchoBackend")
    request.addfinalizer(lambda: backends.BACKENDS.unregister("echo"))
    assert isinstance(backends.make_backend(BackendConfig(name="echo"), None, None, "cpu"), EchoBackend)
    assert config_from_dict({"backend": {"name": "echo"}}).backend.name == "echo"
    with pytest.raises(ConfigError,
                       match=r"backend.name: 'ecko' is not accepted; choose one of \['echo', 'hf', 'vllm'\]"):
        config_from_dict({"backend": {"name": "ecko"}})
