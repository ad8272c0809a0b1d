"""The training loop of docs/ARCHITECTURE.md#data-flow-of-one-training-run. It knows no method by name: every
difference between methods lives behind ``method.teacher``, ``method.advantages`` and ``method.aux_loss``.

    for step in steps:
        trajectories = rollout.collect(policy, envs, tasks × G)
        batch = to_step_batch(trajectories) + old/ref log-probs
        batch = teacher.score(batch)                 # only if the method names a teacher context
        advantages = method.advantages(batch, step)
        ppo_update(...)                              # PPO clip + KL + the method's auxiliary loss (not at lr 0)
        log; checkpoint; every k steps evaluate on the frozen eval panel
"""
from __future__ import annotations

import signal
import time
from pathlib import Path

import torch

from harness.core.loss import masked_mean
from harness.core.seeding import step_seed
from harness.engine import checkpoint, credit, distributed, failures, rollout
from harness.engine.cost import step_positions
from harness.engine.evaluate import evaluate
from harness.engine.interrupt import NO_STOP, Interrupted, StepAbandoned, StopRequest
from harness.engine.phase_memory import PhaseMemory
from harness.engine.run import RunContext, open_run
from harness.engine.update import ppo_update, score
from harness.records.run_files import write_done


def sample_tasks(ctx: RunContext, step: int):
    """``tasks_per_step`` distinct train tasks, drawn from the data seed and the step (so resume-stable)."""
    tasks = ctx.train_panel.tasks
    generator = torch.Generator().manual_seed(step_seed(ctx.seeds.data, step, "tasks"))
    count = min(ctx.cfg.rollout.tasks_per_step, len(tasks))
    return [tasks[i] for i in torch.randperm(len(tasks), generator=generator)[:count].tolist()]


def rl_step(ctx: RunContext, step: int) -> dict[str, float]:
    cfg, timing = ctx.cfg, rollout.RolloutTiming()
    start = time.perf_counter()
    memory = PhaseMemory(ctx.device)  # per phase, beside the memory plan's columns (CUDA only)
    memory.start()
    with ctx.stop.abandonable():  # nothing trained changes before the update: a stop signal drops the step here
        trajs = distributed.collect(  # each rank rolls out its share of the tasks; every rank gets all trajectories
            ctx.accelerator, ctx.backend, sample_tasks(ctx, step), cfg.rollout.group_size,
            step_seed(ctx.seeds.sampling, step, "rollout"),
            lambda tasks, seed: rollout.collect(ctx.backend, ctx.benchmark, ctx.envs, tasks,
                                                group_size=cfg.rollout.group_size, rollout_cfg=cfg.rollout,
                                                max_steps=ctx.max_env_steps, temperature=cfg.rollout.temperature,
                                                seed=seed, timing=timing))
        ctx.backend.sleep()  # generation is over: a colocated engine frees its GPU memory for the update
        generation_memory = memory.end("generation")
        failures.check_share(trajs, cfg.rollout.max_failure_frac, step)
        learned = failures.completed(trajs)  # env failures leave the batch: no advantage, no share in group stats
        batch, scored, teacher_s = _scored_batch(ctx, learned)
        metrics = episode_metrics(trajs, prefix="train/") | scored | generation_memory | memory.end("scoring")
        ctx.method.check_batch(batch)
        advantages, diagnostics = ctx.method.advantages(batch, step)
    metrics.update({f"method/{k}": float(v) for k, v in diagnostics.items()})
    metrics.update(credit.credit_metrics(batch, advantages))  # only where the benchmark labels its turns
    metrics["degenerate_group_frac"] = degenerate_group_fraction(learned)

    update_start = time.perf_counter()
    if cfg.train.updates_weights:  # at lr 0 (the frozen control) the update could not move a weight: skipped
        metrics.update(ppo_update(ctx.model, ctx.optimizer, ctx.accelerator, batch, advantages, ctx.method,
                                  cfg.train, step, ctx.seeds.sampling))
        # the gradients are spent: freed before the sync wakes the engine's weights (and before generation)
        ctx.optimizer.zero_grad(set_to_none=True)
        distributed.sync_weights(ctx.backend, ctx.model)
    tokens = int(batch.prompt_mask.sum() + batch.response_mask.sum())
    metrics.update({"time/generation_s": timing.generation_s, "time/env_s": timing.env_s,
                    "time/prompt_s": timing.prompt_s, "time/teacher_s": teacher_s,
                    "time/update_s": time.perf_counter() - update_start, "time/step_s": time.perf_counter() - start,
                    "train/rows": batch.num_rows, "train/response_tokens": int(batch.response_mask.sum()),
                    "train/tokens": tokens,
                    "cost/tokens": step_positions(cfg, tokens, metrics.get("cost/teacher_tokens", 0))})
    metrics.update(memory.end("update"))  # memory/peak_gib: the step's, over its phases
    return metrics


def _scored_batch(ctx: RunContext, trajs):
    """The step batch of ``trajs`` with the old, reference and (if the method names one) teacher log-probs."""
    cfg = ctx.cfg
    batch = rollout.to_step_batch(trajs, ctx.tokenizer.pad_token_id)
    old_logp = score(ctx.model, batch, cfg.train.ppo_micro_batch, ctx.device, ctx.precision)
    batch = batch.with_columns(old_logp=old_logp)
    if ctx.reference is not None and cfg.train.updates_weights:  # only the update's KL term reads ref_logp
        batch = batch.with_columns(ref_logp=ctx.reference.logprobs(batch, cfg.train.ppo_micro_batch))
    metrics = {"logp_gap": float(masked_mean((old_logp - batch.rollout_logp).abs(), batch.response_mask))}
    teacher_start = time.perf_counter()
    if ctx.method.teacher is not None:
        batch, teacher_metrics = ctx.teacher.score(batch, trajs, ctx.method.teacher)
        metrics.update(teacher_metrics)  # teacher/*: the premise of the method (harness.engine.teacher)
        warning = ctx.teacher.monitor.update(teacher_metrics)
        if warning:
            ctx.log(f"{cfg.name}: {warning}")
    return batch, metrics, time.perf_counter() - teacher_start


def episode_metrics(all_trajs, prefix: str) -> dict[str, float]:
    """Outcome rates over the episodes that ran to their end; an env failure is counted apart, not as a loss."""
    trajs = failures.completed(all_trajs)
    n = max(len(trajs), 1)
    turns = [t for traj in trajs for t in traj.turns]
    out = {
        f"{prefix}success": sum(t.won for t in trajs) / n,
        f"{prefix}score": sum(t.score for t in trajs) / n,
        f"{prefix}return": sum(t.episode_return for t in trajs) / n,
        f"{prefix}episode_length": sum(len(t.turns) for t in trajs) / n,
        f"{prefix}valid_action_ratio": sum(t.action_valid for t in turns) / max(len(turns), 1),
        f"{prefix}truncated_frac": sum(t.truncated for t in trajs) / n,
        f"{prefix}env_failure_frac": len(failures.failed(all_trajs)) / max(len(all_trajs), 1),
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


def train(cfg, resume: bool = False, force: bool = False, log=print, restart_changed: bool = False,
          stop: StopRequest = NO_STOP) -> Path:
    """Run (or resume) one training run; returns its folder. A finished run is left untouched unless ``force``
    (a finished run under another protocol is an error, or is started over with ``restart_changed``). ``stop``:
    the installed signal flag; on a signal the run saves at the step reached and raises :class:`Interrupted`."""
    ctx = open_run(cfg, resume=resume, force=force, log=log, restart_changed=restart_changed)
    if ctx is None:
        return cfg.run_dir
    ctx.stop = stop
    wall_start = time.perf_counter() - ctx.elapsed_s
    status, closed = "FAILED", False
    try:
        next_step, saved = _train_steps(ctx, wall_start)
        if _stop_agreed(ctx):
            status = "KILLED"
            _save_on_stop(ctx, next_step, saved, wall_start)
        try:
            with ctx.stop.abandonable():
                final = evaluate(ctx, cfg.train.steps)
        except StepAbandoned:  # the checkpoint of the last step is on disk: a resume redoes the final evaluation
            status = "KILLED"
            _save_on_stop(ctx, cfg.train.steps, saved, wall_start)
        unsent, closed = ctx.close("FINISHED"), True
        if ctx.accelerator.is_main_process:  # distributed: rank 0 writes the run folder
            write_done(ctx.run_dir, {
                "run_name": cfg.name, "benchmark": cfg.benchmark, "method": cfg.method.name,
                "method_label": cfg.method_label, "seed": cfg.seed, "steps": cfg.train.steps,
                "wall_time_s": time.perf_counter() - wall_start, "final_eval": final,
                "final_eval_step": cfg.train.steps, "protocol_sha256": ctx.protocol["sha256"],
                "config_sha256": ctx.protocol["config_sha256"], **unsent,
            })
    finally:
        if not closed:
            ctx.close(status)
    return ctx.run_dir


def _train_steps(ctx: RunContext, wall_start: float) -> tuple[int, int | None]:
    """The RL steps from ``ctx.start_step``; returns (the next step to run, the step of the last checkpoint
    written). Stops early, at a step boundary, when a stop signal came (on any rank)."""
    cfg, next_step, saved = ctx.cfg, ctx.start_step, None
    try:
        for step in ctx.progress(range(ctx.start_step, cfg.train.steps)):
            if _stop_agreed(ctx):
                break
            with ctx.stop.abandonable():
                if cfg.eval.every > 0 and step % cfg.eval.every == 0 and (step > 0 or cfg.eval.at_start):
                    evaluate(ctx, step)
            metrics = rl_step(ctx, step)
            ctx.log_step(step, metrics)
            next_step = step + 1
            if next_step % cfg.train.checkpoint_every == 0 or next_step == cfg.train.steps:
                checkpoint.save(ctx, next_step, time.perf_counter() - wall_start)
                saved = next_step
    except StepAbandoned:
        pass
    return next_step, saved


def _stop_agreed(ctx: RunContext) -> bool:
    """Whether a stop signal came to any rank (every rank gets the same answer, so the ranks stop together)."""
    if distributed.any_rank(ctx.accelerator, ctx.stop.requested):
        ctx.stop.signum = ctx.stop.signum or signal.SIGTERM  # another rank's signal
        return True
    return False


def _save_on_stop(ctx: RunContext, next_step: int, saved: int | None, wall_start: float):
    """The checkpoint at the step reached (every rank; atomic), then :class:`Interrupted`. Signals that come now
    only set the flag again, so nothing cuts the save short."""
    ctx.stop.abandon = False
    if saved != next_step:
        checkpoint.save(ctx, next_step, time.perf_counter() - wall_start)
    ctx.log(f"{ctx.cfg.name}: stopped by a signal; checkpoint at step {next_step} (resume with --resume)")
    raise Interrupted(ctx.stop.signum, next_step)
