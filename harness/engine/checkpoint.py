"""Checkpoints: the trained weights, optimizer and step, written atomically, so a run killed at any point resumes
from its last checkpoint and reaches the metrics an uninterrupted run reaches. Every random draw of a step
is seeded from (master seed, step), so no RNG stream has to be carried across the restart.

Only what training changes is written: the whole state dict for a full fine-tune, and for a LoRA run the adapter
alone (its parameters are the only ones that require a gradient, and the optimizer holds state for nothing
else); the frozen base is loaded again from ``model.source`` on resume.
"""
from __future__ import annotations

import torch

from harness.engine import distributed
from harness.records.run_files import CHECKPOINT


def trained_state(model) -> dict[str, torch.Tensor]:
    """The state dict of a model whose every parameter is trained; else only its trained parameters, by name."""
    params = dict(model.named_parameters())
    trained = {name: p.detach() for name, p in params.items() if p.requires_grad}
    return model.state_dict() if len(trained) == len(params) else trained


def load_trained_state(model, state: dict[str, torch.Tensor]) -> None:
    """Load :func:`trained_state` back; every trained parameter must be in it and nothing else unknown."""
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = sorted(set(missing) & trained)
    if missing or unexpected:
        raise ValueError(f"the checkpoint does not fit the model: trained parameters missing {missing[:5]}, unknown "
                         f"keys {sorted(unexpected)[:5]}; was it written with other model settings (model.lora_*)?")


def save(ctx, next_step: int, elapsed_s: float) -> None:
    """Every rank calls it (a sharded model's state is gathered); rank 0 writes the full, unsharded state."""
    if distributed.is_sharded(ctx.model):
        full = distributed.full_state(ctx.accelerator, ctx.model, ctx.optimizer)
        if full is None:  # distributed: not rank 0
            return
        model_state, optimizer_state = full
    else:
        model_state = trained_state(ctx.accelerator.unwrap_model(ctx.model))
        optimizer_state = ctx.optimizer.state_dict()
    state = {
        "next_step": next_step,
        "elapsed_s": elapsed_s,
        "model": model_state,
        "optimizer": optimizer_state,
        "protocol_sha256": ctx.protocol["sha256"],
    }
    path = ctx.run_dir / CHECKPOINT
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def restore(ctx, state: dict | None, truncate_logs: bool = True) -> None:
    """Apply a checkpoint's ``state`` (read by ``harness.records.run_state.load_checkpoint``, or None for a fresh start)
    and drop logged rows from after it."""
    if state is None:
        if truncate_logs:
            ctx.metrics_log.truncate_after(-1)
            ctx.eval_log.truncate_after(-1)
        return
    if distributed.is_sharded(ctx.model):
        distributed.load_full_state(ctx.model, ctx.optimizer, state["model"], state["optimizer"])
    else:
        load_trained_state(ctx.accelerator.unwrap_model(ctx.model), state["model"])
        ctx.optimizer.load_state_dict(state["optimizer"])
    distributed.sync_weights(ctx.backend, ctx.model)
    ctx.start_step = state["next_step"]
    ctx.elapsed_s = state["elapsed_s"]
    if truncate_logs:
        ctx.metrics_log.truncate_after(ctx.start_step - 1)
        ctx.eval_log.truncate_after(ctx.start_step - 1)
    ctx.log(f"{ctx.cfg.name}: resumed from the checkpoint of step {ctx.start_step}")
