"""The probability that a sampled turn is exactly a given response: what an exact evaluation sums over instead of
sampling episodes (envs/gates/exact.py; issue 34: a sampled eval's binomial noise was most of a seed's spread).

It mirrors the generation backends (harness/policy/backends/hf.py) step for step: the chat-templated prompt cut to
its last ``max_prompt_tokens``, each token drawn from softmax(logits / temperature) restricted to the top-p nucleus
(``temperature`` 0: the argmax), generation ending at the first stop token or after ``max_response_tokens``. So
P(response) = the product of its tokens' probabilities times the probability of stopping right after them (any
stop token: each one ends the turn with the same text), or 1 for stopping when the response fills the limit.
Other token sequences that decode to the same text (a non-canonical split of a word) are not counted.
"""
from __future__ import annotations

import torch
from torch import Tensor

from harness.policy.backends.hf import _nucleus
from harness.policy.logprobs import pad_left, pad_right, position_ids_from_mask
from harness.policy.precision import Precision
from harness.policy.tokenizer import chat_prompt_ids, stop_token_ids


def sampling_logprobs(logits: Tensor, temperature: float, top_p: float) -> Tensor:
    """log of the distribution :func:`harness.policy.backends.hf.sample_tokens` draws from, ``(..., V)``: the
    tempered softmax, renormalised over the top-p nucleus (-inf outside it); at temperature 0, 0 at the argmax."""
    logits = logits.float()
    if temperature == 0:
        best = logits.argmax(-1, keepdim=True)
        return torch.full_like(logits, float("-inf")).scatter_(-1, best, 0.0)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    if top_p >= 1.0:
        return logp
    kept = _nucleus(logp.exp(), top_p)
    return torch.log(kept / kept.sum(-1, keepdim=True))


def response_probabilities(model, tokenizer, prompts: list[str], responses: list[str], *, temperature: float,
                           top_p: float, max_prompt_tokens: int, max_response_tokens: int, micro_batch: int,
                           precision: Precision | None = None) -> Tensor:
    """P(the policy answers ``prompts[i]`` with exactly ``responses[i]``), float64 ``(rows,)``, in micro-batches."""
    if len(prompts) != len(responses):
        raise ValueError(f"response_probabilities: {len(prompts)} prompts but {len(responses)} responses; pass one "
                         "response per prompt")
    prompt_ids = [ids[-max_prompt_tokens:] for ids in chat_prompt_ids(tokenizer, prompts)]
    response_ids = tokenizer(responses, add_special_tokens=False)["input_ids"] if responses else []
    device = next(model.parameters()).device
    stops = torch.tensor(stop_token_ids(tokenizer), device=device)
    out = torch.zeros(len(prompts), dtype=torch.float64)
    fits = [i for i, ids in enumerate(response_ids) if len(ids) <= max_response_tokens]  # longer: never emitted
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(fits), micro_batch):
            rows = fits[start:start + micro_batch]
            with torch.no_grad(), (precision or Precision()).autocast():
                logp = _rows_logprob(model, [prompt_ids[i] for i in rows], [response_ids[i] for i in rows],
                                     tokenizer.pad_token_id, stops, (temperature, top_p, max_response_tokens))
            out[rows] = logp.double().exp().cpu()
    finally:
        model.train(was_training)
    return out


def _rows_logprob(model, prompt_ids: list[list[int]], response_ids: list[list[int]], pad_id: int, stops: Tensor,
                  sampling: tuple[float, float, int]) -> Tensor:
    """log P(response, then the turn ends) of each row: one forward over prompt + response."""
    temperature, top_p, max_response_tokens = sampling
    device = stops.device
    prompt, prompt_mask = pad_left(prompt_ids, pad_id)
    response, response_mask = pad_right(response_ids, pad_id)
    width = response.shape[1]
    ids = torch.cat([prompt, response], 1).to(device)
    mask = torch.cat([prompt_mask, response_mask], 1).to(device)
    # the last width + 1 positions predict response token 0 .. width-1 and the token after the longest response
    logits = model(input_ids=ids, attention_mask=mask.long(), position_ids=position_ids_from_mask(mask),
                   use_cache=False, logits_to_keep=width + 1).logits
    dist = sampling_logprobs(logits, temperature, top_p)
    response, response_mask = response.to(device), response_mask.to(device)
    tokens = dist[:, :width].gather(-1, response[..., None]).squeeze(-1)
    tokens = torch.where(response_mask, tokens, torch.zeros((), device=device)).sum(-1)
    lengths = response_mask.sum(-1)
    after = dist[torch.arange(len(lengths), device=device), lengths]  # the distribution after the last token
    stop = torch.logsumexp(after[:, stops], dim=-1)
    return tokens + torch.where(lengths >= max_response_tokens, torch.zeros_like(stop), stop)
