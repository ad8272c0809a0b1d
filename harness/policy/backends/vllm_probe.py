"""The log-prob check behind ``backend.sleep_level: 2`` (harness/policy/backends/vllm.py).

Level 2 discards the engine's weights while it sleeps instead of copying them to pinned CPU memory and back (for
the paper profile 15 GB each way a step, only for the sync to overwrite them); vLLM recommends it for RL weight
updates, but it has given garbage outputs (vllm#29341: state the checkpoint does not carry, such as buffers, is
lost with the weights). So after every sync under level 2 the engine scores a fixed probe sequence and the
trainer's model scores the same one; a mean gap above :data:`TOLERANCE` nats a token stops the run, naming the
fix, instead of training on samples from a broken policy.
"""
from __future__ import annotations

import torch

from harness.policy.logprobs import response_logprobs
from harness.policy.tokenizer import chat_prompt_ids

PROBE_PROMPT = "Check the synced weights: go to the kitchen, take the mug, and put it in the cabinet."
PROBE_RESPONSE = "<think>The mug is on the counter.</think><action>take mug 1 from countertop 1</action>"
# Mean |log-prob gap| a token: a compute-dtype engine and trainer agree to a few hundredths of a nat (the run's
# logp_gap); a broken engine is off by nats. An estimate, not measured on a GPU.
TOLERANCE = 0.1


def probe_ids(tokenizer) -> tuple[list[int], list[int]]:
    (prompt,) = chat_prompt_ids(tokenizer, [PROBE_PROMPT])
    return prompt, tokenizer(PROBE_RESPONSE, add_special_tokens=False)["input_ids"]


def engine_logprobs(llm, prompt: list[int], response: list[int], lora_request=None) -> torch.Tensor:
    """The engine's temperature-1 log-probs of ``response`` after ``prompt`` (its prompt log-probs)."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
    extra = {"lora_request": lora_request} if lora_request is not None else {}
    (out,) = llm.generate([{"prompt_token_ids": prompt + response}], params, use_tqdm=False, **extra)
    steps = out.prompt_logprobs[len(prompt):]
    return torch.tensor([step[token].logprob for step, token in zip(steps, response)])


def trainer_logprobs(model, prompt: list[int], response: list[int], precision) -> torch.Tensor:
    """The trainer's log-probs of the same tokens (a collective forward for a sharded model: every rank runs it)."""
    device = next(model.parameters()).device
    ones = lambda ids: torch.ones(1, len(ids), dtype=torch.long, device=device)  # noqa: E731
    with torch.no_grad(), precision.autocast():
        scored = response_logprobs(model, torch.tensor([prompt], device=device), ones(prompt),
                                   torch.tensor([response], device=device), ones(response), temperature=1.0)
    return scored[0].float().cpu()


def check(llm, model, tokenizer, precision, lora_request=None) -> float:
    """The mean gap on the probe; raises when it is above :data:`TOLERANCE`."""
    prompt, response = probe_ids(tokenizer)
    gap = float((engine_logprobs(llm, prompt, response, lora_request)
                 - trainer_logprobs(model, prompt, response, precision)).abs().mean())
    if gap > TOLERANCE:
        raise RuntimeError(f"backend.sleep_level=2: after the weight sync the engine's log-probs differ from the "
                           f"trainer's by {gap:.3f} nats a token on a fixed probe (> {TOLERANCE}); vLLM's level-2 "
                           f"sleep has lost state before (vllm#29341). Pass backend.sleep_level=1")
    return gap
