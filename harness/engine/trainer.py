"""The training loop of docs/ARCHITECTURE.md#data-flow-of-one-training-run. It knows no method by name: every
difference between methods lives behind ``method.teacher``, ``method.advantages`` and ``method.aux_loss``.

    for step in steps:
        trajectories = rollout.collect(policy, envs, tasks × G)
        batch = to_step_batch(trajectories) + old/ref log-probs
        batch = teacher.score(batch)                 # only if the method names a teacher context
        advantages = method.advantages(batch, step)
        ppo_update(...)                              # PPO clip + KL + the method's auxiliary loss
        log; checkpoint; every k steps evaluate on the frozen eval panel
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from harness.core.loss import masked_mean
from harness.engine import distributed, rollout
from harness.engine.evaluate import evaluate
from harness.engine.run import RunContext, open_run
from harness.engine.update import ppo_update, score
from harness.records import checkpoint
from harness.records.run_files import write_done
from harness.records.seeding import step_seed


def sample_tasks(ctx: RunContext, step: int):
    """``tasks_per_step`` distinct train tasks, drawn from the data seed and the step (so resume-stable)."""
    tasks = ctx.train_panel.tasks
    generator = torch.Generator().manual_seed(step_seed(ctx.seeds.data, step, "tasks"))
    count = min(ctx.cfg.rollout.tasks_per_step, len(tasks))
    return [tasks[i] for i in torch.randperm(len(tasks), generator=generator)[:count].tolist()]


def rl_step(ctx: RunContext, step: int) -> dict[str, float]:
    cfg, timing = ctx.cfg, rollout.RolloutTiming()
    start = time.perf_counter()
    # distributed: each rank rolls out its share of the tasks; every rank gets all trajectories (one process: all)
    trajs = distributed.collect(
        ctx.accelerator, ctx.backend, sample_tasks(ctx, step), cfg.rollout.group_size,
        step_seed(ctx.seeds.sampling, step, "rollout"),
        lambda tasks, seed: rollout.collect(ctx.backend, ctx.benchmark, ctx.envs, tasks, group_size=cfg.rollout.group_size,
                                            rollout_cfg=cfg.rollout, max_steps=ctx.max_env_steps,
                                            temperature=cfg.rollout.temperature, seed=seed, timing=timing))
    ctx.backend.sleep()  # generation is over: a colocated engine frees its GPU memory for the update
    batch = rollout.to_step_batch(trajs, ctx.tokenizer.pad_token_id)
    old_logp = score(ctx.model, batch, cfg.train.ppo_micro_batch, ctx.device, ctx.precision)
    batch = batch.with_columns(old_logp=old_logp)
    if ctx.reference is not None:
        batch = batch.with_columns(ref_logp=ctx.reference.logprobs(batch, cfg.train.ppo_micro_batch))
    metrics = episode_metrics(trajs, prefix="train/")
    metrics["logp_gap"] = float(masked_mean((old_logp - batch.rollout_logp).abs(), batch.response_mask))

    teacher_start = time.perf_counter()
    if ctx.method.teacher is not None:
        batch, teacher_metrics = ctx.teacher.score(batch, trajs, ctx.method.teacher)
        metrics.update(teacher_metrics)  # teacher/*: the premise of the method (harness.engine.teacher)
        warning = ctx.teacher.monitor.update(teacher_metrics)
        if warning:
            ctx.log(f"{cfg.name} step {step}: {warning}")
    teacher_s = time.perf_counter() - teacher_start
    ctx.method.check_batch(batch)
    advantages, diagnostics = ctx.method.advantages(batch, step)
    metrics.update({f"method/{k}": float(v) for k, v in diagnostics.items()})
    metrics["degenerate_group_frac"] = degenerate_group_fraction(trajs)

    update_start = time.perf_counter()
    metrics.update(ppo_update(ctx.model, ctx.optimizer, ctx.accelerator, batch, advantages, ctx.method, cfg.train,
                              step, ctx.seeds.sampling))
    distributed.sync_weights(ctx.backend, ctx.model)
    ctx.optimizer.zero_grad(set_to_none=True)  # the gradients are spent: generation must not hold them (memory plan)
    metrics.update({"time/generation_s": timing.generation_s, "time/env_s": timing.env_s,
                    "time/prompt_s": timing.prompt_s, "time/teacher_s": teacher_s,
                    "time/update_s": time.perf_counter() - update_start, "time/step_s": time.perf_counter() - start,
                    "train/rows": batch.num_rows, "train/response_tokens": int(batch.response_mask.sum()),
                    "train/tokens": int(batch.prompt_mask.sum() + batch.response_mask.sum())})
    if ctx.device.type == "cuda":  # since the run started: compared with the memory plan by scripts/gpu_check.sh
        metrics["memory/peak_gib"] = torch.cuda.max_memory_allocated(ctx.device) / 2**30
    return metrics


def episode_metrics(trajs, prefix: str) -> dict[str, float]:
    n = max(len(trajs), 1)
    turns = [t for traj in trajs for t in traj.turns]
    out = {
        f"{prefix}success": sum(t.won for t in trajs) / n,
        f"{prefix}score": sum(t.score for t in trajs) / n,
        f"{prefix}return": sum(t.episode_return for t in trajs) / n,
        f"{prefix}episode_length": sum(len(t.turns) for t in trajs) / n,
        f"{prefix}valid_action_ratio": sum(t.action_valid for t in turns) / max(len(turns), 1),
        f"{prefix}truncated_frac": sum(t.truncated for t in trajs) / n,
        f"{prefix}env_failure_frac": sum(t.failure_reason is not None for t in trajs) / n,
    }
    for task_type in sorted({t.task.task_type for t in trajs}):
        of_type = [t for t in trajs if t.task.task_type == task_type]
        out[f"{prefix}success/{task_type}"] = sum(t.won for t in of_type) / len(of_type)
    return out


def degenerate_group_fraction(trajs) -> float:
    """Share of groups whose rollouts all got the same return: GRPO gives them A = 0 (no learning signal)."""
    returns: dict[int, set] = {}
    for traj in trajs:
        returns.setdefault(traj.group_id, set()).add(round(traj.episode_return, 6))
    return sum(len(r) == 1 for r in returns.values()) / max(len(returns), 1)


def train(cfg, resume: bool = False, force: bool = False, log=print, restart_changed: bool = False) -> Path:
    """Run (or resume) one training run; returns its folder. A finished run is left untouched unless ``force``
    (a finished run under another protocol is an error, or is started over with ``restart_changed``)."""
    ctx = open_run(cfg, resume=resume, force=force, log=log, restart_changed=restart_changed)
    if ctx is None:
        return cfg.run_dir
    wall_start = time.perf_counter() - ctx.elapsed_s
    status = "FAILED"
    try:
        for step in ctx.progress(range(ctx.start_step, cfg.train.steps)):
            if cfg.eval.every > 0 and step % cfg.eval.every == 0 and (step > 0 or cfg.eval.at_start):
                evaluate(ctx, step)
            metrics = rl_step(ctx, step)
            ctx.log_step(step, metrics)
            if (step + 1) % cfg.train.checkpoint_every == 0 or step + 1 == cfg.train.steps:
                checkpoint.save(ctx, step + 1, time.perf_counter() - wall_start)
        final = evaluate(ctx, cfg.train.steps)
        if ctx.accelerator.is_main_process:  # distributed: rank 0 writes the run folder
            write_done(ctx.run_dir, {
                "run_name": cfg.name, "benchmark": cfg.benchmark, "method": cfg.method.name,
                "method_label": cfg.method_label, "seed": cfg.seed, "steps": cfg.train.steps,
                "wall_time_s": time.perf_counter() - wall_start, "final_eval": final,
                "final_eval_step": cfg.train.steps, "protocol_sha256": ctx.protocol["sha256"],
                "config_sha256": ctx.protocol["config_sha256"],
            })
        status = "FINISHED"
    finally:
        ctx.close(status)
    return ctx.run_dir
