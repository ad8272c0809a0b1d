"""Opening a run: everything the loop needs, built once, in an order that fails cheaply first.

Config and method options are validated when the config loads; here the benchmark and its panels come
before any model, so a missing data folder or a bad panel size fails in a second, not after a 7B load. Then the
run folder's state is judged (``harness.records.run_state``: skip, start over or resume, read-only) and the backends and
packages the config needs are checked (``harness.preflight``); the folder is first written once all is built.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from envs.base import Benchmark, TaskPanel
from envs.vector import VectorEnv
from harness.config import RunConfig, seeded_benchmark, to_dict
from harness.core import registry
from harness.core.seeding import Seeds, seed_everything
from harness.engine import checkpoint, distributed
from harness.engine.interrupt import NO_STOP, StopRequest
from harness.engine.reference import Reference, build_reference
from harness.engine.teacher import TeacherScorer
from harness.engine.teacher_budget import check_before_weights, check_teacher_budget
from harness.policy.backends import engine_config, make_backend
from harness.policy.precision import Precision
from harness.policy.source import prepare_policy
from harness.preflight import check_start_up
from harness.progress import progress
from harness.records import run_state
from harness.records.protocol import build_protocol
from harness.records.run_files import EVAL, METRICS, PROTOCOL, StepLog
from harness.records.run_state import PartialRunError, RunIdentityError  # noqa: F401  (the errors callers catch)
from harness.records.tracking import check_store, make_tracker, run_labels


@dataclass
class RunContext:
    """What a run holds while it trains: its :class:`RunSetup` (config, seeds, benchmark, panels, method,
    protocol; read through the properties below, never copied) and what was built from it."""

    setup: RunSetup
    model: Any
    reference: Reference | None  # π_ref of the KL term; None at train.kl_coef 0 (harness/engine/reference.py)
    precision: Precision
    tokenizer: Any
    optimizer: Any
    accelerator: Any
    backend: Any
    teacher: TeacherScorer | None
    envs: Any
    tracker: Any
    metrics_log: StepLog
    eval_log: StepLog
    max_env_steps: int
    start_step: int = 0
    elapsed_s: float = 0.0
    log: Callable = print
    stop: StopRequest = NO_STOP  # the signal handlers' flag (harness/engine/interrupt.py); the CLI installs one

    @property
    def cfg(self) -> RunConfig:
        return self.setup.cfg

    @property
    def run_dir(self) -> Path:
        return self.setup.run_dir

    @property
    def seeds(self) -> Seeds:
        return self.setup.seeds

    @property
    def benchmark(self) -> Benchmark:
        return self.setup.benchmark

    @property
    def train_panel(self) -> TaskPanel:
        return self.setup.train_panel

    @property
    def eval_panel(self) -> TaskPanel:
        return self.setup.eval_panel

    @property
    def method(self) -> registry.Method:
        return self.setup.method

    @property
    def protocol(self) -> dict:
        return self.setup.protocol

    @property
    def device(self):
        return self.accelerator.device

    def progress(self, steps):
        return progress(steps, total=self.cfg.train.steps, desc=self.cfg.name, unit="step", initial=self.start_step,
                        enabled=self.accelerator.is_main_process)

    def log_step(self, step: int, metrics: dict[str, float]) -> None:
        self.metrics_log.append([{"step": step, **metrics}])
        self.tracker.log_metrics(metrics, step)

    def close(self, status: str) -> dict:
        """Close the envs and the tracking run; returns what could not reach MLflow (``{}`` when all did)."""
        self.envs.close()
        for name in (METRICS, EVAL):
            if (self.run_dir / name).exists():
                self.tracker.log_artifact(self.run_dir / name)
        return self.tracker.end(status, flush_timeout_s=self.cfg.tracking.flush_timeout_s)


@dataclass(frozen=True)
class RunSetup:
    """What is settled before any weight loads: the config, the seeds, the benchmark and its panels, the method,
    the protocol and what to do with the run folder (``plan``); ``budget_checked`` is False where the teacher's
    context budget waits for a tokenizer built with the model."""
    cfg: RunConfig
    run_dir: Path
    seeds: Seeds
    benchmark: Benchmark
    train_panel: TaskPanel
    eval_panel: TaskPanel
    method: registry.Method
    protocol: dict
    plan: run_state.RunPlan
    evaluate_only: bool
    budget_checked: bool


def open_run(cfg: RunConfig, resume: bool = False, force: bool = False, log=print,
             evaluate_only: bool = False, restart_changed: bool = False) -> RunContext | None:
    """Build the run's context. ``evaluate_only`` opens an existing run's last checkpoint without touching it;
    ``restart_changed`` starts over a run folder made under another protocol (the workflow's choice)."""
    run_dir = cfg.run_dir
    if evaluate_only:
        cfg = dataclasses.replace(cfg, tracking=dataclasses.replace(cfg.tracking, enabled=False))
    if distributed.launch_rank() != 0:  # distributed: rank 0 alone logs, writes the folder and the MLflow run
        cfg = dataclasses.replace(cfg, tracking=dataclasses.replace(cfg.tracking, enabled=False))
        log = distributed.quiet
    if not evaluate_only:
        check_store(cfg.tracking)  # an unreachable tracking server fails here, before anything is built or written
    with run_state.failure_is_recorded(cfg.tracking, run_dir) as guard:
        # first: building the paper's panels takes longer than finding vLLM missing
        check_start_up(cfg, training=not evaluate_only)
        if evaluate_only and not (run_dir / checkpoint.CHECKPOINT).exists():
            raise FileNotFoundError(f"{run_dir} has no {checkpoint.CHECKPOINT}; train the run first "
                                    f"(python -m harness train ... with the same config and overrides)")
        if cfg.train.cpu_threads > 0:  # before the protocol, which records the threads the run computes with
            torch.set_num_threads(cfg.train.cpu_threads)
        seeds = Seeds.from_master(cfg.seed)
        seed_everything(seeds)
        benchmark = seeded_benchmark(cfg, seeds)
        train_panel = benchmark.panel("train")
        eval_panel = benchmark.panel(cfg.eval.split, cfg.eval.panel_size)
        method = registry.build(cfg.method.name, config=cfg.method.config)
        # the teacher context must fit its prompt limit: refused here, before any weight loads, where it can be
        budget_checked = check_before_weights(cfg, benchmark, method.teacher)
        protocol = build_protocol(config=to_dict(cfg), method_options=dataclasses.asdict(method.config),
                                  seeds=seeds.as_dict(), template_sha256=benchmark.template.sha256,
                                  panels={"train": train_panel, "eval": eval_panel})
        plan = (run_state.RunPlan("resume", "evaluate",
                                  state=run_state.load_checkpoint(run_dir / checkpoint.CHECKPOINT))
                if evaluate_only else run_state.plan_run(run_dir, protocol, resume, force, restart_changed))
        if plan.action == "skip":
            log(f"{cfg.name}: {plan.reason}")
            if cfg.tracking.enabled and not evaluate_only:
                backfill_finished(run_dir, cfg.tracking, log)
            return None
        setup = RunSetup(cfg, run_dir, seeds, benchmark, train_panel, eval_panel, method, protocol, plan,
                         evaluate_only, budget_checked)
        ctx = _build_context(setup, log, guard)
        checkpoint.restore(ctx, plan.state, truncate_logs=not evaluate_only)
        if plan.action == "resume" and not evaluate_only:
            ctx.tracker.resume_from(ctx.start_step)  # backfills what an outage left unsent before the kill
        return ctx


def _build_context(setup: RunSetup, log: Callable, guard) -> RunContext:
    cfg, run_dir, benchmark, method, plan = setup.cfg, setup.run_dir, setup.benchmark, setup.method, setup.plan
    evaluate_only, protocol = setup.evaluate_only, setup.protocol
    precision = Precision(cfg.model.dtype, distributed.device_type(cfg))
    accelerator = distributed.make_accelerator(cfg, precision)  # one process, or one rank of an FSDP launch
    # Loaded on the CPU: the reference is copied from it there (an offloaded copy never visits the GPU), then
    # accelerator.prepare moves the policy to the device and gives its forward the compute-dtype autocast (FSDP:
    # distributed.prepare shards it over the ranks' devices).
    # FSDP: rank 0 alone loads the weights; the other ranks build the model on the meta device and receive theirs
    # when it is sharded (sharding.shard), so a node holds one full copy, not one a rank
    load_on = "meta" if distributed.loads_on_meta(cfg) else "cpu"
    with accelerator.main_process_first():  # distributed: rank 0 builds a missing tiny model, the others load it
        model, tokenizer, model_dir = prepare_policy(cfg, benchmark, load_on, log=log)
    if not setup.budget_checked:  # a tiny model built just now: its tokenizer settles the teacher budget
        check_teacher_budget(cfg, benchmark, method.teacher, tokenizer)
    adapter_off = cfg.model.lora_rank > 0  # LoRA's reference is the trained module itself, once it is prepared
    reference = None if evaluate_only or adapter_off else build_reference(cfg, model, precision, accelerator.device)
    model, optimizer = distributed.prepare(accelerator, cfg, model, lambda params: torch.optim.AdamW(
        [p for p in params if p.requires_grad], lr=cfg.train.lr, weight_decay=cfg.train.weight_decay))  # all, or LoRA's
    model.eval()
    policy = accelerator.unwrap_model(model)
    if adapter_off and not evaluate_only:  # FSDP: the sharded module (rank >= 1 built the unprepared one on meta)
        reference = build_reference(cfg, policy, precision, accelerator.device)
    if cfg.model.gradient_checkpointing and accelerator.device.type == "cuda":
        # non-reentrant: gradients reach a LoRA adapter inside a checkpointed block although the frozen base's
        # inputs need no gradient (the reentrant variant drops them)
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    backend = make_backend(engine_config(cfg), policy, tokenizer, accelerator.device, precision,
                           seed=setup.seeds.sampling)
    teacher = (TeacherScorer(policy, tokenizer, cfg.benchmark, cfg.rollout.max_prompt_tokens, cfg.train.ppo_micro_batch,
                             precision, cfg.rollout.teacher_context_tokens) if method.teacher is not None else None)
    envs = VectorEnv(benchmark.make_env, num_workers=distributed.env_workers(cfg))  # FSDP: the rank's share
    accelerator.wait_for_everyone()  # distributed: every rank has read the folder before rank 0 changes it
    if not evaluate_only and accelerator.is_main_process:  # everything is built: the first write to the run folder
        if plan.action == "fresh" and run_dir.exists():
            log(f"{cfg.name}: starting {run_dir} over ({plan.reason})")
        run_state.start_run_dir(run_dir, plan, protocol)
    labels = run_labels(cfg, protocol)
    tracker = guard.tracker = make_tracker(
        cfg.tracking, experiment=labels["experiment"], run_name=labels["run_name"], run_dir=run_dir,
        params=labels["params"], tags=labels["tags"] | {"model_dir": str(model_dir)},
        replaces=plan.previous_mlflow_run, log=log)
    if plan.action == "fresh":
        tracker.log_artifact(run_dir / PROTOCOL)
    return RunContext(
        setup=setup, model=model, reference=reference, precision=precision, tokenizer=tokenizer, optimizer=optimizer,
        accelerator=accelerator, backend=backend, teacher=teacher, envs=envs, tracker=tracker,
        metrics_log=_step_log(accelerator, run_dir / METRICS), eval_log=_step_log(accelerator, run_dir / EVAL),
        max_env_steps=benchmark.max_steps, log=log,
    )


def backfill_finished(run_dir: Path, tracking_cfg, log) -> None:
    """A finished run whose done.json names calls MLflow never got: send them now (``harness sync``)."""
    from harness.records.backfill import needs_sync, sync

    if needs_sync(run_dir):
        try:
            sync(run_dir, tracking_cfg.uri, request_timeout_s=tracking_cfg.request_timeout_s, log=log)
        except Exception as err:  # noqa: BLE001 - the run is finished; its files hold everything
            log(f"tracking: could not backfill MLflow from {run_dir} ({type(err).__name__}: {err})")


def _step_log(accelerator, path: Path):
    return StepLog(path) if accelerator.is_main_process else distributed.NullStepLog()  # distributed: rank 0 writes
