"""A stand-in for ``python -m harness train`` with the same command line and the same run-folder contract, for
the workflow tests: ``fake_train.py --config PROFILE.yaml --resume --restart-if-changed benchmark=B method=M seed=S``.

It appends one line per invocation to $FAKE_TRAIN_LOG, sleeps $FAKE_TRAIN_SLEEP seconds (so a test can kill the
workflow mid-grid), then writes a synthetic run with done.json last. Like the engine it refuses to overwrite a
finished run. With $FAKE_TRAIN_SLICES=N a run needs N invocations: the first N - 1 end as a job slice does when
SLURM's time limit stops it (exit 75, the engine's EXIT_REQUEUE, nothing finished).

For the GPU scheduling tests, with $FAKE_TRAIN_DEVICES_LOG set it also appends a JSON line with the run, the
CUDA_VISIBLE_DEVICES it was given and its thread count, and with $FAKE_TRAIN_BARRIER=N it waits (at most
$FAKE_TRAIN_BARRIER_TIMEOUT seconds) until N runs have started: a run that saw all N start was running while every
other one started, so N runs that all passed the barrier ran at the same time.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from synthetic_runs import write_run  # noqa: E402

EXIT_REQUEUE = 75  # harness.engine.interrupt.EXIT_REQUEUE (not imported: the stand-in runs without the harness)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--restart-if-changed", action="store_true")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    values = dict(item.split("=", 1) for item in args.overrides)
    profile = yaml.safe_load(Path(args.config).read_text())
    benchmark, method, seed = values["benchmark"], values["method"], int(values["seed"])
    run_dir = Path(profile.get("output_dir", "results/runs")) / benchmark / method / f"seed{seed}"
    if (run_dir / "done.json").exists():
        print(f"refusing to overwrite the finished run {run_dir}", file=sys.stderr)
        return 1
    with open(os.environ["FAKE_TRAIN_LOG"], "a") as log:
        log.write(f"{benchmark}/{method}/seed{seed}\n")
    started = Path(os.environ["FAKE_TRAIN_LOG"]).read_text().splitlines().count(f"{benchmark}/{method}/seed{seed}")
    if started < int(os.environ.get("FAKE_TRAIN_SLICES", "1")):
        return EXIT_REQUEUE  # this slice's time is up: saved, to be resumed by the next job
    if os.environ.get("FAKE_TRAIN_DEVICES_LOG"):
        record_devices(Path(os.environ["FAKE_TRAIN_DEVICES_LOG"]), f"{benchmark}/{method}/seed{seed}")
    time.sleep(float(os.environ.get("FAKE_TRAIN_SLEEP", "0")))
    write_run(Path(profile.get("output_dir", "results/runs")), benchmark, method, seed, p_success=0.5)
    return 0


def record_devices(path: Path, run: str) -> None:
    entry = {"run": run, "devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
             "threads": os.environ.get("OMP_NUM_THREADS")}
    with open(path.with_suffix(".started"), "a") as started:
        started.write(run + "\n")
    wanted = int(os.environ.get("FAKE_TRAIN_BARRIER", "0"))
    deadline = time.time() + float(os.environ.get("FAKE_TRAIN_BARRIER_TIMEOUT", "60"))
    while len(path.with_suffix(".started").read_text().splitlines()) < wanted and time.time() < deadline:
        time.sleep(0.05)
    entry["saw_all_start"] = len(path.with_suffix(".started").read_text().splitlines()) >= wanted
    with open(path, "a") as log:
        log.write(json.dumps(entry) + "\n")


if __name__ == "__main__":
    sys.exit(main())
