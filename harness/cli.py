"""``python -m harness``: train, eval, protocol, plan, build-model, sync, doctor.

Every command takes ``--config PATH`` (a profile in config/) and any number of ``key.sub=value`` overrides,
e.g. ``python -m harness train --config config/smoke.yaml method=sharpo method.lam=0.2 seed=1``.
The config is validated in full before anything heavy is loaded.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from harness.config_help import add_config_help

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EPILOG = """overrides:
  key=value pairs applied on top of the config file, parsed as YAML scalars:
    method=sharpo            pick a method by registry name (or a dotted path pkg.module:Class)
    method.lam=0.2           set one of the method's options (unknown options are an error)
    benchmark=webshop seed=1 train.steps=10 rollout.group_size=4
  `python -m harness protocol --config ...` prints the resolved config and its hashes without training.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter, conflict_handler="resolve")
        add_config_help(p)
        p.add_argument("--config", default=None,
                       help="profile YAML (config/cpu.yaml, tiny.yaml, smoke.yaml, paper.yaml); "
                            "omitted = the paper protocol defaults")
        p.add_argument("overrides", nargs="*", help="key.sub=value overrides (see below)")
        return p

    train = add("train", "Train one run (method × benchmark × seed) and evaluate it; writes results/runs/...")
    train.add_argument("--resume", action="store_true",
                       help="continue an unfinished run from its last checkpoint (starts fresh if there is none)")
    train.add_argument("--force", action="store_true", help="delete a finished or partial run and start over")
    train.add_argument("--restart-if-changed", action="store_true",
                       help="start over a run folder made under another protocol instead of refusing it (the "
                            "workflow passes it: a changed profile re-runs the runs it changed)")
    evaluate = add("eval", "Evaluate a run's last checkpoint on the eval panel (config eval.split / eval.panel_size)")
    evaluate.add_argument("--out", default=None, help="csv for the episodes (default: <run>/eval_<split>_final.csv)")
    add("protocol", "Print the run's protocol record (resolved config, hashes, versions) as JSON; loads no model")
    plan = add("plan", "Print the run's memory plan per GPU (harness/memory_plan.py) and whether it fits; loads no "
                       "weights. Exit 0 = fits, 3 = does not fit")
    plan.add_argument("--gpu-gib", type=float, default=None,
                      help="memory of one GPU in GiB to plan for (default: CUDA device 0 of this machine)")
    build = add("build-model", "Build (and warm-start) the tiny offline model for this config, or check a checkpoint "
                               "path; a warm start shipped in config/warm_starts/ is copied, not rebuilt")
    build.add_argument("--rebuild", action="store_true", help="train the warm start again even where one is cached or "
                                                              "shipped, and say whether it matches the shipped weights")
    build.add_argument("--ship", action="store_true", help="copy the built warm start into config/warm_starts/ (with "
                                                           "its manifest), replacing the shipped one")
    sync = sub.add_parser("sync", help="Backfill a run's MLflow run from its folder (what a tracking-server outage "
                                       "left unsent; done.json names it)",
                          description="Send a run folder's journalled metrics the MLflow store lacks, its files as "
                                      "artifacts, and FINISHED for a finished run. Safe to repeat.")
    sync.add_argument("run_dir", help="the run folder (results/<profile>/runs/<benchmark>/<method>/seed<n>)")
    sync.add_argument("--uri", default=None, help="the MLflow store (default: the run's tracking.uri, with "
                                                  "$MLFLOW_TRACKING_URI read from this environment)")
    sub.add_parser("doctor", help="Print the torch, CUDA, driver, vLLM and transformers versions, import vLLM, and "
                                  "name what is wrong with this machine's GPU stack and how to fix it "
                                  "(harness/doctor.py)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "doctor":
        from harness import doctor

        return doctor.main()
    if args.command == "sync":
        from harness.records.backfill import sync

        print(json.dumps(sync(args.run_dir, args.uri), indent=2))
        return 0
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per save/load of a tiny model is noise in the run logs
    from harness.config import load_config
    from harness.core.typed import ConfigError

    try:
        cfg = load_config(args.config, args.overrides)
    except (ConfigError, KeyError) as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    from harness.records.run_state import RunStateError

    try:
        return _run_command(args, cfg)
    except ConfigError as err:  # includes the start-up checks (harness.preflight)
        print(f"config error: {err}", file=sys.stderr)
        return 2
    except RunStateError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def _run_command(args, cfg) -> int:
    if args.command == "train":
        from harness.engine import distributed
        from harness.engine.interrupt import EXIT_REQUEUE, Interrupted, StopRequest
        from harness.engine.trainer import train

        # SIGTERM / SIGUSR1 (a scheduler's time limit, preemption or early warning): save at the step reached and
        # exit EXIT_REQUEUE (docs/recovery.md); Ctrl-C still unwinds at once and marks the run FAILED
        stop = StopRequest(abandon=distributed.launch_world_size() == 1).install()
        ranks_agree = False
        try:
            train(cfg, resume=args.resume, force=args.force, restart_changed=args.restart_if_changed, stop=stop)
            ranks_agree = True
        except ConnectionError as err:  # the tracking server is down: nothing was built or trained
            print(f"tracking error: {err}", file=sys.stderr)
            return 2
        except Interrupted as stopped:
            ranks_agree = True  # the ranks agreed on the stop (trainer._stop_agreed)
            print(f"interrupted: {stopped}", file=sys.stderr)
            return EXIT_REQUEUE
        finally:
            stop.uninstall()
            distributed.close_process_group(ranks_agree)
    elif args.command == "eval":
        from harness.engine import distributed
        from harness.engine.evaluate import evaluate_checkpoint

        result = evaluate_checkpoint(cfg, args.out)
        distributed.close_process_group(ranks_agree=True)
        print(json.dumps(result, indent=2))
    elif args.command == "protocol":
        print(json.dumps(protocol_only(cfg), indent=2, default=str))
    elif args.command == "plan":
        return _plan(cfg, args.gpu_gib)
    elif args.command == "build-model":
        return _build_model(cfg, args)
    return 0


def _build_model(cfg, args) -> int:
    from harness.config import seeded_benchmark
    from harness.policy import shipped
    from harness.policy.source import ensure_tiny_model, prepare_policy, tiny_model_dir

    if cfg.model.source != "tiny":
        if args.rebuild or args.ship:
            print("config error: --rebuild and --ship apply to model.source=tiny only", file=sys.stderr)
            return 2
        _, _, model_dir = prepare_policy(cfg, seeded_benchmark(cfg), "cpu")
    else:
        model_dir = tiny_model_dir(cfg)
        ensure_tiny_model(cfg, seeded_benchmark(cfg), model_dir, rebuild=args.rebuild)
        if args.ship:
            shipped.ship(model_dir, "python -m harness build-model " + " ".join(sys.argv[2:]))
    print(model_dir)
    return 0


def _plan(cfg, gpu_gib: float | None) -> int:
    from harness import memory_plan

    gpu_gib = gpu_gib if gpu_gib is not None else memory_plan.device_gib()
    if gpu_gib is None or gpu_gib <= 0:
        print("plan: no CUDA device here to read the GPU memory from; pass --gpu-gib <GiB of one GPU> "
              "(e.g. --gpu-gib 80)", file=sys.stderr)
        return 2
    text, fits = memory_plan.report(cfg, gpu_gib)
    print(text)
    return 0 if fits else memory_plan.EXIT_DOES_NOT_FIT


def protocol_only(cfg) -> dict:
    import dataclasses

    from harness.config import seeded_benchmark, to_dict
    from harness.core import registry
    from harness.core.seeding import Seeds
    from harness.records.protocol import build_protocol

    seeds = Seeds.from_master(cfg.seed)
    benchmark = seeded_benchmark(cfg, seeds)
    method = registry.build(cfg.method.name, cfg.method.options)
    return build_protocol(config=to_dict(cfg), method_options=dataclasses.asdict(method.config),
                          seeds=seeds.as_dict(), template_sha256=benchmark.template.sha256,
                          panels={"train": benchmark.panel("train"),
                                  "eval": benchmark.panel(cfg.eval.split, cfg.eval.panel_size)})
