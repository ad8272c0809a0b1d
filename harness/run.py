"""Opening a run: everything the loop needs, built once, in an order that fails cheaply first.

Config and method options are validated when the config loads; here the benchmark and its panels come
before any model, so a missing data folder or a bad panel size fails in a second, not after a 7B load.
"""
from __future__ import annotations

import copy
import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from envs.base import Benchmark, TaskPanel
from envs.vector import VectorEnv
from harness import checkpoint, registry
from harness.backends import engine_config, make_backend
from harness.config import RunConfig, to_dict
from harness.policy import prepare_policy
from harness.protocol import build_protocol, write_json
from harness.run_files import EVAL, METRICS, PROTOCOL, StepLog, is_finished
from harness.seeding import Seeds, seed_everything, seeded_benchmark
from harness.teacher import TeacherScorer
from harness.tracking import check_store, experiment_name, make_tracker


class PartialRunError(RuntimeError):
    pass


@dataclass
class RunContext:
    cfg: RunConfig
    run_dir: Path
    seeds: Seeds
    benchmark: Benchmark
    train_panel: TaskPanel
    eval_panel: TaskPanel
    method: registry.Method
    model: Any
    ref_model: Any
    tokenizer: Any
    optimizer: Any
    accelerator: Any
    backend: Any
    teacher: TeacherScorer | None
    envs: Any
    tracker: Any
    protocol: dict
    metrics_log: StepLog
    eval_log: StepLog
    max_env_steps: int
    start_step: int = 0
    elapsed_s: float = 0.0
    log: Callable = print

    @property
    def device(self):
        return self.accelerator.device

    def progress(self, steps):
        from tqdm.auto import tqdm

        return tqdm(steps, desc=self.cfg.name, initial=self.start_step, total=self.cfg.train.steps,
                    disable=None, dynamic_ncols=True)

    def log_step(self, step: int, metrics: dict[str, float]) -> None:
        self.metrics_log.append([{"step": step, **metrics}])
        self.tracker.log_metrics(metrics, step)

    def close(self, status: str) -> None:
        self.envs.close()
        for name in (METRICS, EVAL):
            if (self.run_dir / name).exists():
                self.tracker.log_artifact(self.run_dir / name)
        self.tracker.end(status)


def prepare_run_dir(cfg: RunConfig, resume: bool, force: bool, log) -> Path | None:
    run_dir = cfg.run_dir
    if is_finished(run_dir) and not force:
        log(f"{cfg.name}: already finished in {run_dir} (done.json); nothing to do. Pass --force to redo it.")
        return None
    if force and run_dir.exists():
        shutil.rmtree(run_dir)
    if run_dir.exists() and any(run_dir.iterdir()) and not resume:
        raise PartialRunError(f"{run_dir} holds an unfinished run of {cfg.name}. Pass --resume to continue it from "
                              "its last checkpoint, or --force to delete it and start over.")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def open_run(cfg: RunConfig, resume: bool = False, force: bool = False, log=print,
             evaluate_only: bool = False) -> RunContext | None:
    """Build the run's context. ``evaluate_only`` opens an existing run's last checkpoint without touching it."""
    if evaluate_only:
        run_dir = cfg.run_dir
        if not (run_dir / checkpoint.CHECKPOINT).exists():
            raise FileNotFoundError(f"{run_dir} has no {checkpoint.CHECKPOINT}; train the run first "
                                    f"(python -m harness train ... with the same config and overrides)")
        cfg = dataclasses.replace(cfg, tracking=dataclasses.replace(cfg.tracking, enabled=False))
        resume = True
    else:
        check_store(cfg.tracking)  # an unreachable tracking server fails here, before any model is built
        run_dir = prepare_run_dir(cfg, resume, force, log)
    if run_dir is None:
        return None
    if cfg.train.cpu_threads > 0:
        torch.set_num_threads(cfg.train.cpu_threads)
    seeds = Seeds.from_master(cfg.seed)
    seed_everything(seeds)
    benchmark = seeded_benchmark(cfg, seeds)
    train_panel = benchmark.panel("train")
    eval_panel = benchmark.panel(cfg.eval.split, cfg.eval.panel_size)
    method = registry.build(cfg.method.name, cfg.method.options)
    protocol = build_protocol(config=to_dict(cfg), method_options=dataclasses.asdict(method.config),
                              seeds=seeds.as_dict(), template_sha256=benchmark.template.sha256,
                              panels={"train": train_panel, "eval": eval_panel})
    if not evaluate_only:
        check_protocol(run_dir, protocol)

    from accelerate import Accelerator

    accelerator = Accelerator(cpu=_device(cfg) == "cpu")
    model, tokenizer, model_dir = prepare_policy(cfg, benchmark, accelerator.device, log=log)
    ref_model = _frozen_copy(model) if cfg.train.kl_coef > 0 else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    model, optimizer = accelerator.prepare(model, optimizer)
    model.eval()
    if cfg.model.gradient_checkpointing and accelerator.device.type == "cuda":
        accelerator.unwrap_model(model).gradient_checkpointing_enable()

    tracker = make_tracker(cfg.tracking, experiment=experiment_name(cfg.profile, cfg.benchmark), run_name=cfg.name,
                           run_dir=run_dir,
                           params=to_dict(cfg) | {"method_options": protocol["method"]["options"]},
                           tags={"protocol_sha256": protocol["sha256"], "git_commit": str(protocol["git_commit"]),
                                 "method": cfg.method.name, "method_label": cfg.method_label, "profile": cfg.profile,
                                 "model_dir": str(model_dir)})
    if not evaluate_only:
        tracker.log_artifact(run_dir / PROTOCOL)
    ctx = RunContext(
        cfg=cfg, run_dir=run_dir, seeds=seeds, benchmark=benchmark, train_panel=train_panel, eval_panel=eval_panel,
        method=method, model=model, ref_model=ref_model, tokenizer=tokenizer, optimizer=optimizer,
        accelerator=accelerator,
        backend=make_backend(engine_config(cfg), accelerator.unwrap_model(model), tokenizer, accelerator.device),
        teacher=(TeacherScorer(accelerator.unwrap_model(model), tokenizer, cfg.benchmark,
                               cfg.rollout.max_prompt_tokens, cfg.train.ppo_micro_batch)
                 if method.teacher is not None else None),
        envs=VectorEnv(benchmark.make_env, num_workers=cfg.rollout.env_workers),
        tracker=tracker, protocol=protocol,
        metrics_log=StepLog(run_dir / METRICS), eval_log=StepLog(run_dir / EVAL),
        max_env_steps=cfg.rollout.max_env_steps or benchmark.default_max_steps, log=log,
    )
    if evaluate_only:
        checkpoint.restore(ctx, truncate_logs=False)
    elif resume:
        checkpoint.restore(ctx)
    return ctx


def check_protocol(run_dir: Path, protocol: dict) -> None:
    """A resumed run must continue under the protocol it started with."""
    path = run_dir / PROTOCOL
    if path.exists():
        import json

        old = json.loads(path.read_text())
        if old.get("sha256") != protocol["sha256"]:
            raise PartialRunError(f"{run_dir} was started under protocol {old.get('sha256', '?')[:12]} but this config "
                                  f"gives {protocol['sha256'][:12]}; resume with the original config, or --force.")
    write_json(path, protocol)


def _device(cfg: RunConfig) -> str:
    if cfg.train.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return cfg.train.device


def _frozen_copy(model):
    ref = copy.deepcopy(model)
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref
