"""One PPO update sharded over the ranks of a torchrun launch, against the same update on one process.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/fsdp_update_check.py OUT.json [overrides]

Every rank opens the run as ``train`` does (config/smoke.yaml, ``train.strategy=fsdp``, fp32) and rolls out one
step through the sharded path; all ranks then hold the same batch. Rank 0 also loads the same starting weights
into an unsharded copy. Scoring, one ``ppo_update`` and a checkpoint round trip run on both, and rank 0 writes
the differences as JSON to OUT.json (tests/test_fsdp.py reads it). Advantages are drawn at random: the smoke
policy rarely wins, and GRPO's all-zero advantages would make every update a no-op.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # launched as a script: import harness from this checkout


def main(out: str, overrides: list[str]) -> None:
    from harness.config import load_config
    from harness.engine import checkpoint, distributed, rollout, sharding
    from harness.engine.run import open_run
    from harness.engine.update import ppo_update, score
    from harness.policy.source import prepare_policy
    from harness.records.run_state import load_checkpoint

    cfg = load_config(ROOT / "config" / "smoke.yaml", ["train.strategy=fsdp", "model.dtype=float32",
                                            "tracking.enabled=false"] + overrides)
    ctx = open_run(cfg, force=True)
    acc, main_rank = ctx.accelerator, ctx.accelerator.is_main_process
    report: dict = {"world_size": acc.num_processes,
                    "local_parameters": distributed.gather_objects(acc, sharding.local_parameter_count(ctx.model))}
    single = prepare_policy(cfg, ctx.benchmark, "cpu")[0] if main_rank else None  # the same starting weights
    trajs = distributed.collect(acc, ctx.backend, list(ctx.train_panel.tasks[:cfg.rollout.tasks_per_step]),
                                cfg.rollout.group_size, 1234, lambda tasks, seed: rollout.collect(
                                    ctx.backend, ctx.benchmark, ctx.envs, tasks, group_size=cfg.rollout.group_size,
                                    rollout_cfg=cfg.rollout, max_steps=ctx.max_env_steps,
                                    temperature=cfg.rollout.temperature, seed=seed))
    batch = rollout.to_step_batch(trajs, ctx.tokenizer.pad_token_id)
    micro = cfg.train.ppo_micro_batch
    count = -(-batch.num_rows // micro)
    if count % 2 == 0 and count > 1:  # an odd number of micro-batches: one rank runs a weight-0 repeat
        batch = batch.select(torch.arange((count - 1) * micro))
    old_logp = score(ctx.model, batch, micro, ctx.device)
    ref_logp = ctx.reference.logprobs(batch, micro)  # the sharded frozen copy: the starting policy, as old_logp
    report.update(reference_sharded=distributed.is_sharded(ctx.reference.model),
                  reference_max_abs_diff=float((ref_logp - old_logp).abs().max()))
    batch = batch.with_columns(old_logp=old_logp, ref_logp=old_logp + 0.01 * torch.randn(
        old_logp.shape, generator=torch.Generator().manual_seed(1)))
    advantages = torch.randn(batch.response_mask.shape, generator=torch.Generator().manual_seed(0))
    advantages = advantages * batch.response_mask
    report.update(rows=batch.num_rows, micro_batches=-(-batch.num_rows // micro))
    rows_run = []  # the rows of every forward this rank runs in the teacher pass
    hook = ctx.model.register_forward_pre_hook(
        lambda module, args, kwargs: rows_run.append(len((args or [kwargs.get("input_ids")])[0])), with_kwargs=True)
    teacher = teacher_logprobs(ctx, ctx.model, batch, trajs)  # each rank its share of the micro-batches, gathered
    hook.remove()
    report["teacher_forward_rows"] = distributed.gather_objects(acc, sum(rows_run))
    if main_rank:
        single_teacher = teacher_logprobs(ctx, single, batch, trajs)
        report["teacher_max_abs_diff"] = float((single_teacher - teacher).abs().max())

    start = time.perf_counter()
    sharded = ppo_update(ctx.model, ctx.optimizer, acc, batch, advantages, ctx.method, cfg.train, 0, 7)
    report["sharded_update_s"] = time.perf_counter() - start
    full = distributed.full_state(acc, ctx.model, ctx.optimizer)
    checkpoint.save(ctx, 1, 0.0)
    engine = _EngineWithOwnWeights()
    distributed.sync_weights(engine, ctx.model)  # what vLLM receives: the full weights, on every rank
    report["engine_weights_max_abs_diff"] = distributed.gather_objects(acc, engine.max_abs_diff(ctx.model))
    if main_rank:
        report.update(compare_with_one_process(single, batch, advantages, old_logp, ctx, sharded, full[0]))
    acc.wait_for_everyone()  # rank 0 has written the checkpoint
    report["checkpoint_max_abs_diff"] = reload_checkpoint(ctx, load_checkpoint(ctx.run_dir / checkpoint.CHECKPOINT),
                                                          full)
    ctx.close("FINISHED")
    if main_rank:
        Path(out).write_text(json.dumps(report, indent=2))


class _EngineWithOwnWeights:
    """A stand-in for the vLLM backend: it keeps what it is synced with, received as the backend receives it
    (harness/policy/engine_weights.py: one full tensor at a time)."""

    def sync_weights(self, model) -> None:
        from harness.policy.engine_weights import stream_weights

        self.state = {name: tensor.clone() for name, tensor in stream_weights(model, torch.float32)}

    def max_abs_diff(self, sharded) -> float:
        """How far the received full tensors are from the shards this rank holds (their rows of each tensor)."""
        worst = 0.0
        for name, param in sharded.state_dict().items():
            local = param.to_local()
            rows = param.device_mesh.get_local_rank() * -(-param.shape[0] // param.device_mesh.size())
            worst = max(worst, float((self.state[name][rows:rows + local.shape[0]] - local).abs().max()))
        return worst


def teacher_logprobs(ctx, model, batch, trajs) -> torch.Tensor:
    """The skills context's teacher log-probs of ``batch`` under ``model`` (the sharded policy or one process's)."""
    from harness.engine.teacher import TeacherScorer

    scorer = TeacherScorer(model, ctx.tokenizer, ctx.cfg.benchmark, ctx.cfg.rollout.max_prompt_tokens,
                           ctx.cfg.train.ppo_micro_batch, ctx.precision)
    return scorer.score(batch, trajs, "skills")[0].teacher_logp


def compare_with_one_process(single, batch, advantages, old_logp, ctx, sharded_metrics, sharded_state) -> dict:
    from harness.engine.update import ppo_update, score

    cfg = ctx.cfg
    before = {k: v.detach().clone() for k, v in single.state_dict().items()}
    optimizer = torch.optim.AdamW(single.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    single_logp = score(single, batch, cfg.train.ppo_micro_batch, "cpu")
    start = time.perf_counter()
    metrics = ppo_update(single, optimizer, ctx.accelerator, batch, advantages, ctx.method, cfg.train, 0, 7)
    single_s = time.perf_counter() - start
    after = single.state_dict()
    keys = sorted(set(after) & set(sharded_state))
    return {
        "single_update_s": single_s,
        "compared_tensors": len(keys), "single_tensors": len(after),
        "old_logp_max_abs_diff": float((single_logp - old_logp).abs().max()),
        "metrics_single": metrics, "metrics_sharded": sharded_metrics,
        "metric_abs_diff": {k: abs(metrics[k] - sharded_metrics[k]) for k in metrics},
        "weight_max_abs_diff": max(float((after[k] - sharded_state[k]).abs().max()) for k in keys),
        "weight_max_abs_change": max(float((after[k] - before[k]).abs().max()) for k in keys),
    }


def reload_checkpoint(ctx, state: dict, saved) -> float | None:
    """Scramble the sharded weights, restore the checkpoint as a resume does, and return how far the restored
    full state is from the saved one (rank 0; None elsewhere)."""
    from harness.engine import checkpoint, distributed
    with torch.no_grad():
        for param in ctx.model.parameters():
            param.mul_(0.5).add_(1.0)
    checkpoint.restore(ctx, state, truncate_logs=False)
    restored = distributed.full_state(ctx.accelerator, ctx.model, ctx.optimizer)
    if restored is None:
        return None
    diffs = [float((restored[0][k] - saved[0][k]).abs().max()) for k in saved[0]]
    moments = [float((restored[1]["state"][p][m] - saved[1]["state"][p][m]).abs().max())
               for p in saved[1]["state"] for m in ("exp_avg", "exp_avg_sq")]
    return max(diffs + moments)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
