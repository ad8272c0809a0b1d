"""Batched per-token log-probs of response tokens given prompts: the scorer of the trainer, the reference policy and
the teacher pass.

Layout (the one of :class:`harness.core.batch.StepBatch`): prompts left-padded, responses right-padded, so the prompt
of every row ends exactly where its response starts. Position ids count real tokens only, so a row's log-probs do
not depend on how much padding its batch needed (the same convention as the generation backends).
"""
from __future__ import annotations

import torch
from torch import Tensor


def pad_left(rows: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """Left-pad token lists into ``(ids, mask)`` of shape ``(rows, longest)``."""
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row):] = True
    return ids, mask


def pad_right(rows: list[list[int]], pad_id: int, width: int | None = None) -> tuple[Tensor, Tensor]:
    """Right-pad token lists into ``(ids, mask)`` of shape ``(rows, width or longest)``."""
    width = max((len(r) for r in rows), default=0) if width is None else width
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, :len(row)] = True
    return ids, mask


def position_ids_from_mask(mask: Tensor) -> Tensor:
    """0, 1, 2, ... over real tokens; padding positions get 0 (they are masked out anyway)."""
    return (mask.long().cumsum(-1) - 1).clamp_(min=0)


def token_logprobs(logits: Tensor, tokens: Tensor, temperature: float = 1.0) -> Tensor:
    """log softmax(logits / temperature)[tokens], computed in float32. ``logits`` (..., V), ``tokens`` (...)."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def response_logprobs(model, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor,
                      micro_batch: int = 8, temperature: float = 1.0) -> Tensor:
    """log pi(y_t | prompt, y_<t) at ``temperature`` for every response token: ``(rows, response_len)``, 0 on padding.

    Runs in micro-batches of ``micro_batch`` rows; inside each, the columns that are padding in every row are cut
    off (left of the prompts, right of the responses), so short rows cost little. Differentiable when grad is on.
    """
    rows, response_len = response_ids.shape
    if (prompt_ids.shape[0] != rows or prompt_mask.shape != prompt_ids.shape
            or response_mask.shape != response_ids.shape):
        raise ValueError(f"shape mismatch: prompt_ids {tuple(prompt_ids.shape)}, "
                         f"prompt_mask {tuple(prompt_mask.shape)}, "
                         f"response_ids {tuple(response_ids.shape)}, response_mask {tuple(response_mask.shape)}")
    if micro_batch < 1:
        raise ValueError(f"micro_batch must be >= 1, got {micro_batch}")
    prompt_mask, response_mask = prompt_mask.bool(), response_mask.bool()
    chunks = []
    for start in range(0, rows, micro_batch):
        part = slice(start, start + micro_batch)
        chunks.append(_micro_batch_logprobs(model, prompt_ids[part], prompt_mask[part], response_ids[part],
                                            response_mask[part], temperature))
    out = torch.cat(chunks) if chunks else torch.zeros(0, response_len)
    return out * response_mask  # exact zeros on padding (and no gradient through it)


def _micro_batch_logprobs(model, prompt_ids, prompt_mask, response_ids, response_mask, temperature) -> Tensor:
    rows, response_len = response_ids.shape
    prompt_width = int(prompt_mask.sum(1).max().item()) if prompt_mask.numel() else 0
    response_width = int(response_mask.sum(1).max().item()) if response_mask.numel() else 0
    if prompt_width == 0:
        raise ValueError("response_logprobs: a micro-batch has only empty prompts; every row needs a prompt token "
                         "to condition its first response token on")
    if response_width == 0:
        return torch.zeros(rows, response_len, device=response_ids.device)
    # Drop the all-padding columns; the last response token is never an input (nothing is predicted after it).
    prompt_ids, prompt_mask = prompt_ids[:, -prompt_width:], prompt_mask[:, -prompt_width:]
    inputs = torch.cat([prompt_ids, response_ids[:, :response_width - 1]], dim=1)
    mask = torch.cat([prompt_mask, response_mask[:, :response_width - 1]], dim=1)
    out = model(input_ids=inputs, attention_mask=mask.long(), position_ids=position_ids_from_mask(mask),
                use_cache=False, logits_to_keep=response_width)
    logp = token_logprobs(out.logits, response_ids[:, :response_width], temperature)
    return torch.nn.functional.pad(logp, (0, response_len - response_width))
