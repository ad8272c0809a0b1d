"""The PPO update: recompute old/ref log-probs, then mini-batches with gradient accumulation.

One call per RL step. Everything method-specific is behind ``method.advantages`` (computed once on the whole
batch, since group statistics need every row) and ``harness.core.loss.policy_loss`` (which adds the method's
auxiliary term); nothing here knows which method runs.
"""
from __future__ import annotations

from collections import defaultdict

import torch

from harness.core.batch import StepBatch
from harness.core.loss import policy_loss
from harness.core.seeding import step_seed
from harness.engine import distributed
from harness.policy.logprobs import response_logprobs
from harness.policy.precision import Precision


def score(model, batch: StepBatch, micro_batch: int, device, precision: Precision | None = None) -> torch.Tensor:
    """log π(y_t | h_t) of the batch's response tokens under ``model``, no gradient, in the run's compute dtype
    (``precision``; None = as the module is, float32 or the autocast accelerate gave its forward). A sharded model:
    each rank scores its share of the micro-batches, every rank gets all rows."""
    def rows_logp(rows: slice) -> torch.Tensor:
        with torch.no_grad(), (precision or Precision()).autocast():
            logp = response_logprobs(model, batch.prompt_ids[rows].to(device), batch.prompt_mask[rows].to(device),
                                     batch.response_ids[rows].to(device), batch.response_mask[rows].to(device),
                                     micro_batch=micro_batch)
        return logp.float().cpu()

    return distributed.map_micro_batches(model, batch.num_rows, micro_batch, rows_logp)


def ppo_update(model, optimizer, accelerator, batch: StepBatch, advantages: torch.Tensor, method, train_cfg,
               step: int, seed: int) -> dict[str, float]:
    """``ppo_epochs`` passes over shuffled mini-batches of ``ppo_mini_batch`` rows; one optimiser step each. A
    sharded model's ranks split each mini-batch's micro-batches (harness.engine.distributed.micro_batch_share).

    The forward runs in the compute dtype through the autocast ``accelerator.prepare`` put on the module's forward
    (harness/policy/precision.py), or under FSDP through its mixed-precision policy; the gradients and the step are
    float32."""
    model.train()
    micro_size, grad_scale = train_cfg.ppo_micro_batch, distributed.gradient_scale(model)
    device = accelerator.device
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    n = batch.num_rows
    for epoch in range(train_cfg.ppo_epochs):
        generator = torch.Generator().manual_seed(step_seed(seed, step * 1000 + epoch, "minibatch"))
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, train_cfg.ppo_mini_batch):
            mini = order[start:start + train_cfg.ppo_mini_batch]
            optimizer.zero_grad(set_to_none=True)
            for j, counted in distributed.micro_batch_share(model, -(-len(mini) // micro_size)):
                rows = mini[j * micro_size:(j + 1) * micro_size]
                micro = batch.select(rows).to(device)
                logp = response_logprobs(model, micro.prompt_ids, micro.prompt_mask, micro.response_ids,
                                         micro.response_mask, micro_batch=len(rows))
                loss, metrics = policy_loss(micro, logp, advantages[rows].to(device), method, train_cfg, step)
                # a repeat (not counted) only keeps a sharded model's ranks in step: weight 0
                weight = len(rows) / len(mini) * grad_scale if counted else 0.0
                accelerator.backward(loss * weight)
                for key, value in metrics.items() if counted else ():
                    sums[key] += float(value)
                    counts[key] += 1
            grad_norm = distributed.clip_grad_norm_(accelerator, model, train_cfg.grad_clip)
            optimizer.step()
            sums["grad_norm"] += float(grad_norm)
            counts["grad_norm"] += 1
    model.eval()
    sums, counts = distributed.merge_sums(model, sums, counts)
    sums["actor/grad_norm"] = sums.pop("grad_norm")
    counts["actor/grad_norm"] = counts.pop("grad_norm")
    out = {k: sums[k] / counts[k] for k in sums}  # policy_loss names its metrics (actor/..., method/...)
    out["actor/optimizer_steps"] = train_cfg.ppo_epochs * -(-n // train_cfg.ppo_mini_batch)
    return out
