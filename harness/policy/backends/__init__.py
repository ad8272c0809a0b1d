"""Generation backends: batched sampling that returns the sampled tokens and their rollout log-probs.

``hf`` runs the policy module itself (CPU or GPU, used by the tests and the tiny profile); ``vllm`` runs a vLLM
engine on the same weights and receives the trainer's weights after every update. ``vllm`` is imported only when
asked for, so the package never needs vLLM installed.

Log-prob convention (both backends): ``Generation.logprobs[t]`` is log softmax(logits / temperature) of the
sampled token — the tempered distribution over the full vocabulary, before top-p truncation. This is what
:func:`harness.policy.logprobs.response_logprobs` recomputes at the same temperature and what verl uses for \
``old_logp``,
so the trainer's gap mean|logp_train - logp_rollout| measures weight staleness and numerics only. With
``top_p = 1`` (the paper's rollout setting) it is exactly the sampling distribution.
"""
from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from harness.core.plugins import Registry

# backend.name -> "module:Class" with a ``from_config`` classmethod. A new backend is its module plus one line here;
# the module is imported only when a run asks for it, so vLLM stays an optional dependency.
BACKENDS: Registry[type] = Registry("backend", hint="A backend is a module with a class that has from_config, "
                                                  "added here as BACKENDS.add(name, 'module:Class')")
BACKENDS.add("hf", "harness.policy.backends.hf:HFBackend")
BACKENDS.add("vllm", "harness.policy.backends.vllm:VLLMBackend")


@dataclass
class Generation:
    text: str  # decoded response, without the end-of-turn token
    prompt_ids: list[int]  # the chat-templated prompt actually fed (after left truncation)
    response_ids: list[int]  # sampled tokens, including the end-of-turn token when it was generated
    logprobs: list[float]  # one per response token (see the module docstring for the convention)
    truncated: bool  # True when max_new_tokens ran out before the end-of-turn token


@runtime_checkable
class GenerationBackend(Protocol):
    def generate(self, prompts: list[str], *, temperature: float, top_p: float, max_new_tokens: int,
                 max_prompt_tokens: int, seed: int) -> list[Generation]:
        """Sample one response per raw user prompt (the backend applies the chat template).

        Prompts longer than ``max_prompt_tokens`` keep their last tokens; generation stops at the end-of-turn
        token; the same prompts and seed give the same generations.
        """
        ...

    def sync_weights(self, model) -> None:
        """Make the next ``generate`` use ``model``'s current weights."""
        ...

    def sleep(self) -> None:
        """The generation phase is over: release accelerator memory the update can use (until the next call)."""
        ...


def make_backend(cfg, model, tokenizer, device, precision=None, seed: int | None = None) -> GenerationBackend:
    """Build the backend named by ``cfg.name`` (a :class:`harness.config.BackendConfig`), generating in the compute
    dtype of ``precision`` (a :class:`harness.policy.precision.Precision`; None = the module's own dtype).
    ``seed`` (the run's sampling seed) reaches a backend whose ``from_config`` takes one (an engine seeded once)."""
    cls = BACKENDS.get(cfg.name)
    extra = {"seed": seed} if seed is not None and "seed" in inspect.signature(cls.from_config).parameters else {}
    return cls.from_config(cfg, model, tokenizer, device, precision, **extra)


def engine_config(cfg):
    """``cfg.backend`` of a :class:`harness.config.RunConfig` with the engine's sizes filled in: ``max_model_len``
    = the prompt limit + the response limit (the longest sequence a rollout feeds), ``tensor_parallel_size`` = the
    run's GPU count (``grid.gpus``, at least 1), or 1 under ``train.strategy=fsdp``, where every rank (one GPU)
    runs its own engine for its share of the rollouts."""
    backend = cfg.backend
    gpus = 1 if cfg.train.strategy == "fsdp" else max(1, cfg.grid.gpus)
    return dataclasses.replace(
        backend,
        max_model_len=backend.max_model_len or cfg.rollout.max_prompt_tokens + cfg.rollout.max_response_tokens,
        tensor_parallel_size=backend.tensor_parallel_size or gpus,
        sleep_level=default_sleep_level(backend.sleep_level, cfg.model.lora_rank > 0),
    )


def default_sleep_level(level: int | None, lora: bool) -> int:
    """``backend.sleep_level``, where null: 2 (a full fine-tune's sync re-sends every weight, so nothing needs
    keeping), 1 under LoRA (the sync sends the adapter only: a discarded base would never come back)."""
    if level is not None:
        return level
    return 1 if lora else 2


def decode_response(tokenizer, response_ids: list[int], stop_ids: set[int]) -> str:
    """Response text without a trailing end-of-turn token."""
    ids = response_ids[:-1] if response_ids and response_ids[-1] in stop_ids else response_ids
    return tokenizer.decode(ids, skip_special_tokens=False)


def check_sampling_args(temperature: float, top_p: float, max_new_tokens: int, max_prompt_tokens: int) -> None:
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if max_new_tokens < 1 or max_prompt_tokens < 1:
        raise ValueError(f"max_new_tokens and max_prompt_tokens must be >= 1, "
                         f"got {max_new_tokens}, {max_prompt_tokens}")
