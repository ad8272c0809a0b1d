"""Evaluation on the frozen eval panel: one episode per task at the validation temperature, and, where the benchmark
can enumerate its states (``Benchmark.exact_success``, Gates), each task's success probability computed exactly
(``success_exact``: no sampling noise; the sampled rate stays beside it)."""
from __future__ import annotations

import time

from harness.core.seeding import step_seed
from harness.engine import distributed, rollout
from harness.policy.sequence_prob import response_probabilities
from harness.policy.warm_start import format_response


def evaluate(ctx, step: int) -> dict[str, float]:
    """Roll out every eval task once; append one row per episode to eval.csv; return the summary. An episode
    an environment failure ended is rolled out once more; one that fails again is counted as a failure, apart
    from the outcome rates (which are over the episodes that ran to their end)."""
    cfg = ctx.cfg
    start = time.perf_counter()
    trajs = _episodes(ctx, list(ctx.eval_panel.tasks), step_seed(ctx.seeds.sampling, step, "eval"))
    retry = [i for i, traj in enumerate(trajs) if traj.failure_reason is not None]
    if retry:
        again = _episodes(ctx, [trajs[i].task for i in retry], step_seed(ctx.seeds.sampling, step, "eval-retry"))
        for i, traj in zip(retry, again):
            trajs[i] = traj
    rows = [episode_row(step, traj, retried=i in retry) for i, traj in enumerate(trajs)]
    exact_start = time.perf_counter()
    exact = exact_success(ctx)
    exact_s = time.perf_counter() - exact_start
    for row, p in zip(rows, exact or ()):
        row["success_exact"] = p
    ctx.eval_log.append(rows)
    summary, metrics = _summary(rows, exact)
    metrics["time/eval_s"] = time.perf_counter() - start
    if exact is not None:
        metrics["time/eval_exact_s"] = exact_s  # part of time/eval_s
    ctx.tracker.log_metrics(metrics, step)
    exact_note = f" (exact {summary['success_exact']:.4f})" if exact is not None else ""
    ctx.log(f"{cfg.name}: eval at step {step}: success {summary['success']:.3f}{exact_note} "
            f"score {summary['score']:.3f} ({len(rows)} episodes, {summary['env_failures']} env failures, "
            f"{metrics['time/eval_s']:.0f}s)")
    return summary


def exact_success(ctx) -> list[float] | None:
    """Each eval task's success probability at the eval's sampling settings, from the benchmark's enumeration of
    its states (None where it has none). With ``rollout.think`` there is none either: a reasoning text has no one
    exact form to score, so the probability of the taught one would be far below the policy's."""
    cfg = ctx.cfg
    if cfg.rollout.think:
        return None

    def score(pairs) -> list[float]:
        prompts = [prompt for prompt, _ in pairs]
        responses = [format_response(action, think=False) for _, action in pairs]
        return distributed.map_micro_batches(ctx.model, len(pairs), cfg.train.ppo_micro_batch, lambda rows: (
            response_probabilities(ctx.model, ctx.tokenizer, prompts[rows], responses[rows],
                                   temperature=cfg.eval.temperature, top_p=cfg.rollout.top_p,
                                   max_prompt_tokens=cfg.rollout.max_prompt_tokens,
                                   max_response_tokens=cfg.rollout.max_response_tokens,
                                   micro_batch=cfg.train.ppo_micro_batch, precision=ctx.precision))).tolist()

    return ctx.benchmark.exact_success(score, list(ctx.eval_panel.tasks), cfg.rollout.history_length)


def _summary(rows: list[dict], exact: list[float] | None) -> tuple[dict, dict]:
    """The outcome rates over the episodes that ran to their end, and the exact success over every task."""
    ran = [r for r in rows if not r["failure_reason"]]
    summary = {"success": _mean(r["success"] for r in ran), "score": _mean(r["score"] for r in ran),
               "return": _mean(r["return"] for r in ran), "length": _mean(r["length"] for r in ran)}
    if exact is not None:  # nothing fails in a computation
        summary["success_exact"] = _mean(exact)
    by_type: dict[str, list[float]] = {}
    for r in ran:
        by_type.setdefault(r["task_type"], []).append(r["success"])
    metrics = {f"eval/{k}": v for k, v in summary.items()}  # eval/success_exact: the primary number where given
    metrics.update({f"eval/success/{t}": _mean(v) for t, v in sorted(by_type.items())})
    summary["env_failures"] = len(rows) - len(ran)
    metrics["eval/env_failure_frac"] = summary["env_failures"] / max(len(rows), 1)
    return summary, metrics


def _episodes(ctx, tasks: list, seed: int) -> list:
    """One episode per task, in the panel's order; distributed: each rank rolls out its share of the tasks on its
    own engine and envs (one process's draws for the first share), and every rank receives all the episodes."""
    cfg = ctx.cfg
    return distributed.collect(ctx.accelerator, ctx.backend, tasks, 1, seed, lambda share, share_seed: rollout.collect(
        ctx.backend, ctx.benchmark, ctx.envs, share, group_size=1, rollout_cfg=cfg.rollout,
        max_steps=ctx.max_env_steps, temperature=cfg.eval.temperature, seed=share_seed))


def episode_row(step: int, traj, retried: bool = False) -> dict:
    return {"step": step, "task_id": traj.task.task_id, "task_type": traj.task.task_type,
            "success": int(traj.won), "score": traj.score, "return": traj.episode_return,
            "length": len(traj.turns), "truncated": int(traj.truncated), "failure_reason": traj.failure_reason or "",
            "retried": int(retried)}


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def evaluate_checkpoint(cfg, out: str | None = None) -> dict[str, float]:
    """Evaluate a run's last checkpoint on ``cfg.eval`` (split, panel size) without changing the run."""
    from pathlib import Path

    from harness.engine.run import open_run
    from harness.records.run_files import StepLog

    ctx = open_run(cfg, evaluate_only=True)
    path = Path(out) if out else ctx.run_dir / f"eval_{cfg.eval.split}_final.csv"
    path.unlink(missing_ok=True)
    path.with_suffix(".jsonl").unlink(missing_ok=True)
    ctx.eval_log = StepLog(path)
    try:
        return evaluate(ctx, ctx.start_step)
    finally:
        ctx.close("FINISHED")
