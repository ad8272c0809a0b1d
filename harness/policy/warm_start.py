"""The supervised warm start: fine-tuning on (prompt, response) demonstrations before RL, so that the tiny model
starts from a policy that plays the benchmark's format (harness/policy/source.py caches the result)."""
from __future__ import annotations

import math
import random
import time
from typing import Callable

import torch

from harness.policy.tokenizer import chat_prompt_ids, end_of_turn_id
from harness.progress import progress


def format_response(action: str, think: bool) -> str:
    """The response a demonstration teaches: the action in tags, with a short reasoning when thinking is on."""
    thought = f"<think>The next useful step is to {action}.</think>" if think else ""
    return f"{thought}<action>{action}</action>"


def warm_start(model, tokenizer, demos: list[tuple[str, str]], epochs: int, lr: float, seed: int,
               batch_size: int = 16, log: Callable | None = None, max_prompt_tokens: int | None = None,
               prompt_loss_weight: float = 0.0, warmup_fraction: float = 0.0, cosine: bool = False,
               max_grad_norm: float | None = None, prompt_limits: list[int] | None = None) -> dict:
    """Supervised fine-tuning on (prompt, response) pairs; the loss covers the response tokens and ``<|im_end|>``.

    The prompt goes through the chat template exactly as in a rollout (left-truncated to ``max_prompt_tokens``);
    the response is tokenised on its own, as the policy would emit it after ``<|im_start|>assistant\\n``.
    ``prompt_loss_weight`` > 0 adds that weight times the mean next-token loss on the prompt tokens: a model built
    from scratch learns to copy names from its context (the admissible actions repeat the observation's objects)
    several times faster with it, since every prompt token then teaches. The learning rate warms up linearly over
    ``warmup_fraction`` of the optimizer steps, then stays constant or (``cosine``) decays to 0.
    Returns ``{"loss_per_epoch": [...], "first_loss", "last_loss", "response_tokens", "seconds"}``; the losses are
    the response-token loss alone. ``prompt_limits`` (one per demonstration) replaces ``max_prompt_tokens`` where a
    demonstration has its own limit (a teacher's privileged prompt).
    """
    from harness.policy.logprobs import pad_left, pad_right

    if not demos:
        raise ValueError("warm_start: no demonstrations; pass (prompt, response) pairs from the benchmarks' experts")
    started = time.perf_counter()
    prompts = chat_prompt_ids(tokenizer, [p for p, _ in demos])
    if prompt_limits is not None:
        prompts = [ids[-limit:] for ids, limit in zip(prompts, prompt_limits)]
    elif max_prompt_tokens:
        prompts = [ids[-max_prompt_tokens:] for ids in prompts]
    eot = end_of_turn_id(tokenizer)
    responses = [ids + [eot] for ids in tokenizer([r for _, r in demos], add_special_tokens=False)["input_ids"]]
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    classes = [len(demos)] if prompt_limits is None else [prompt_limits.count(v) for v in set(prompt_limits)]
    total_steps = epochs * sum(-(-n // batch_size) for n in classes)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _lr_factor(step, total_steps, warmup_fraction, cosine))
    order_rng = random.Random(seed)
    was_training = model.training
    model.train()
    losses: list[float] = []
    for epoch in range(epochs):
        total, count = 0.0, 0
        batches = _batches(len(demos), batch_size, order_rng, prompt_limits)
        shown = progress(batches, total=len(batches), desc=f"warm start, epoch {epoch + 1}/{epochs}", unit="batch")
        for rows in shown:
            prompt_ids, prompt_mask = pad_left([prompts[i] for i in rows], tokenizer.pad_token_id)
            response_ids, response_mask = pad_right([responses[i] for i in rows], tokenizer.pad_token_id)
            response_loss, prompt_loss, n_tokens = _sft_losses(model, prompt_ids.to(device), prompt_mask.to(device),
                                                               response_ids.to(device), response_mask.to(device))
            loss = response_loss + prompt_loss_weight * prompt_loss if prompt_loss_weight else response_loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if max_grad_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            scheduler.step()
            total += response_loss.item() * n_tokens
            count += n_tokens
        losses.append(total / count)
        if log is not None:
            log({"epoch": epoch, "sft_loss": losses[-1]})
    model.train(was_training)
    optimizer.zero_grad(set_to_none=True)
    return {"loss_per_epoch": losses, "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None, "response_tokens": sum(map(len, responses)),
            "seconds": time.perf_counter() - started}


def _batches(count: int, batch_size: int, rng: random.Random, limits: list[int] | None) -> list[list[int]]:
    """Shuffled mini-batches of demonstration indices. Demonstrations with different prompt limits (a teacher's
    longer privileged prompts) are batched apart, so a plain prompt is not left-padded to a context's length."""
    order = list(range(count))
    rng.shuffle(order)
    if limits is None or len(set(limits)) == 1:
        return [order[start:start + batch_size] for start in range(0, count, batch_size)]
    batches = []
    for limit in sorted(set(limits)):
        same = [i for i in order if limits[i] == limit]
        batches += [same[start:start + batch_size] for start in range(0, len(same), batch_size)]
    rng.shuffle(batches)
    return batches


def _lr_factor(step: int, total_steps: int, warmup_fraction: float, cosine: bool) -> float:
    warmup = int(warmup_fraction * total_steps)
    if step < warmup:
        return (step + 1) / warmup
    if not cosine:
        return 1.0
    progress = (step - warmup) / max(1, total_steps - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def _sft_losses(model, prompt_ids, prompt_mask, response_ids, response_mask):
    """(mean response-token NLL, mean prompt-token NLL, number of response tokens) in one forward pass."""
    from harness.policy.logprobs import position_ids_from_mask

    ids = torch.cat([prompt_ids, response_ids], dim=1)
    mask = torch.cat([prompt_mask, response_mask], dim=1).bool()
    logits = model(input_ids=ids, attention_mask=mask.long(), position_ids=position_ids_from_mask(mask)).logits
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].float().transpose(1, 2), ids[:, 1:], reduction="none")
    target_mask = mask[:, 1:]
    is_response = torch.zeros_like(mask)
    is_response[:, prompt_ids.shape[1]:] = response_mask.bool()
    is_response = is_response[:, 1:]
    is_prompt = target_mask & mask[:, :-1] & ~is_response
    n_response = int(is_response.sum())
    response_loss = (nll * is_response).sum() / max(1, n_response)
    prompt_loss = (nll * is_prompt).sum() / is_prompt.sum().clamp(min=1)
    return response_loss, prompt_loss, n_response
