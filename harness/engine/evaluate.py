"""Evaluation on the frozen eval panel: one episode per task at the validation temperature."""
from __future__ import annotations

import time

from harness.engine import distributed, rollout
from harness.records.seeding import step_seed


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
    ctx.eval_log.append(rows)
    ran = [r for r in rows if not r["failure_reason"]]
    summary = {"success": _mean(r["success"] for r in ran), "score": _mean(r["score"] for r in ran),
               "return": _mean(r["return"] for r in ran), "length": _mean(r["length"] for r in ran)}
    by_type: dict[str, list[float]] = {}
    for r in ran:
        by_type.setdefault(r["task_type"], []).append(r["success"])
    metrics = {f"eval/{k}": v for k, v in summary.items()}
    metrics.update({f"eval/success/{t}": _mean(v) for t, v in sorted(by_type.items())})
    summary["env_failures"] = len(rows) - len(ran)
    metrics["eval/env_failure_frac"] = summary["env_failures"] / max(len(rows), 1)
    metrics["time/eval_s"] = time.perf_counter() - start
    ctx.tracker.log_metrics(metrics, step)
    ctx.log(f"{cfg.name}: eval at step {step}: success {summary['success']:.3f} score {summary['score']:.3f} "
            f"({len(rows)} episodes, {summary['env_failures']} env failures, {metrics['time/eval_s']:.0f}s)")
    return summary


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
