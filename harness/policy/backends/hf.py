"""The ``hf`` backend: a batched sampling loop over the policy module itself (prefill + KV-cached decode).

Written by hand rather than with ``model.generate`` so that the returned log-probs are computed from the very
logits the token was drawn from, with the same left-padding position ids as :mod:`harness.policy.logprobs` (and no
logits processors in between): the two agree to float rounding. Generation runs under the run's autocast
(``precision``, harness/policy/precision.py), as the scoring does. The backend shares the trainer's module, so
``sync_weights`` has nothing to do (a LoRA module generates with its adapter applied).
"""
from __future__ import annotations

import inspect

import torch
from torch import Tensor
from transformers import DynamicCache

from harness.policy.backends import Generation, check_sampling_args, decode_response
from harness.policy.logprobs import pad_left, position_ids_from_mask, token_logprobs
from harness.policy.precision import Precision
from harness.policy.tokenizer import chat_prompt_ids, stop_token_ids


class HFBackend:
    strategies = ("single", "fsdp")  # under FSDP it generates on the rank's gathered module (distributed.full_weights)

    @classmethod
    def from_config(cls, cfg, model, tokenizer, device, precision: Precision | None = None) -> "HFBackend":
        """The backend of a run (``cfg``: its ``backend`` section; the hf backend needs none of it)."""
        return cls(model, tokenizer, device, precision=precision)

    def __init__(self, model, tokenizer, device=None, batch_size: int = 64, precision: Precision | None = None):
        self.model = model
        self.precision = precision or Precision()
        self.tokenizer = tokenizer
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.batch_size = batch_size  # rows per forward; larger lists of prompts are generated in slices
        self.stop_ids = stop_token_ids(tokenizer)
        # transformers 5.x renamed past_key_values -> cache; accept both so the vLLM venv's older release works too.
        # A peft model's forward takes **kwargs: the base model's signature decides.
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self._cache_kw = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"

    def sync_weights(self, model) -> None:
        """No-op: generation runs on the trainer's own module, so it always sees the current weights."""
        if model is not self.model:
            raise ValueError("HFBackend generates with the module it was built with; pass that same module")

    def sleep(self) -> None:
        """Nothing to release: the policy module is the trainer's own."""

    @torch.no_grad()
    def generate(self, prompts: list[str], *, temperature: float, top_p: float, max_new_tokens: int,
                 max_prompt_tokens: int, seed: int) -> list[Generation]:
        """Sample one response per prompt; ``temperature == 0`` is greedy (log-probs then at temperature 1)."""
        check_sampling_args(temperature, top_p, max_new_tokens, max_prompt_tokens)
        prompt_ids = [ids[-max_prompt_tokens:] for ids in chat_prompt_ids(self.tokenizer, prompts)]
        generator = torch.Generator(self.device).manual_seed(seed)
        was_training = self.model.training
        self.model.eval()
        try:
            out: list[Generation] = []
            for start in range(0, len(prompt_ids), self.batch_size):
                part = prompt_ids[start:start + self.batch_size]
                with self.precision.autocast():
                    tokens, logps = self._sample(part, temperature, top_p, max_new_tokens, generator)
                out.extend(self._to_generations(part, tokens, logps))
            return out
        finally:
            self.model.train(was_training)

    def _sample(self, prompt_ids: list[list[int]], temperature: float, top_p: float, max_new_tokens: int,
                generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Returns sampled tokens and their log-probs, ``(rows, steps)``; rows stop at their first stop token."""
        # Prefill each distinct prompt once (the G rollouts of a task share their first prompt, and rollouts often
        # revisit the same state), then copy its cache rows to every row that asked for it.
        unique: dict[tuple[int, ...], int] = {}
        row_of = torch.tensor([unique.setdefault(tuple(p), len(unique)) for p in prompt_ids], device=self.device)
        ids, mask = pad_left([list(p) for p in unique], self.tokenizer.pad_token_id)
        ids, mask = ids.to(self.device), mask.to(self.device).long()
        positions = position_ids_from_mask(mask)
        cache = _new_cache(self.model.config)
        logits = self._forward(ids, mask, positions, cache)
        if len(unique) < len(prompt_ids):
            cache.batch_select_indices(row_of)
            logits, mask, positions = logits[row_of], mask[row_of], positions[row_of]
        stop = torch.tensor(self.stop_ids, device=self.device)
        finished = torch.zeros(len(prompt_ids), dtype=torch.bool, device=self.device)
        tokens, logps = [], []
        next_position = positions[:, -1:] + 1  # every row ends with a real token (left padding)
        for step in range(max_new_tokens):
            token, logp = sample_tokens(logits, temperature, top_p, generator)
            token = token.masked_fill(finished, self.tokenizer.pad_token_id)
            tokens.append(token)
            logps.append(logp.masked_fill(finished, 0.0))
            finished |= torch.isin(token, stop)
            if finished.all() or step == max_new_tokens - 1:
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            logits = self._forward(token[:, None], mask, next_position, cache)
            next_position = next_position + 1
        return torch.stack(tokens, 1).cpu(), torch.stack(logps, 1).cpu()

    def _forward(self, ids: Tensor, mask: Tensor, positions: Tensor, cache) -> Tensor:
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1, **{self._cache_kw: cache})
        return out.logits[:, -1]

    def _to_generations(self, prompt_ids, tokens: Tensor, logps: Tensor) -> list[Generation]:
        stops = set(self.stop_ids)
        result = []
        for prompt, row_tokens, row_logps in zip(prompt_ids, tokens.tolist(), logps.tolist()):
            end = next((i + 1 for i, t in enumerate(row_tokens) if t in stops), None)
            response = row_tokens[:end]
            result.append(Generation(text=decode_response(self.tokenizer, response, stops), prompt_ids=list(prompt),
                                     response_ids=response, logprobs=row_logps[:len(response)],
                                     truncated=end is None))
        return result


def sample_tokens(logits: Tensor, temperature: float, top_p: float,
                  generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Draw one token per row from softmax(logits / temperature) restricted to the top-p nucleus.

    Returns the tokens and their log-probs under the tempered full distribution (see harness.policy.backends).
    Sampling is the exponential race argmax(p_i / E_i), E_i ~ Exp(1), which draws i with probability p_i.
    """
    logits = logits.float()
    if temperature == 0:
        token = logits.argmax(-1)
        return token, token_logprobs(logits, token)
    scaled = logits / temperature
    logp_all = torch.log_softmax(scaled, dim=-1)
    weights = logp_all.exp()
    if top_p < 1.0:
        weights = _nucleus(weights, top_p)
    race = torch.empty_like(weights).exponential_(1.0, generator=generator)
    token = (weights / race).argmax(-1)
    return token, logp_all.gather(-1, token[:, None]).squeeze(-1)


def _nucleus(probs: Tensor, top_p: float) -> Tensor:
    """Zero the probabilities outside the smallest set whose mass reaches ``top_p`` (the top token always stays)."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)


def _new_cache(config):
    try:
        return DynamicCache(config=config)
    except TypeError:  # older transformers
        return DynamicCache()
