"""Soak check: kill the smoke grid at random moments, resume it each time, and compare with an uninterrupted grid.

    python benchmarks/soak.py --kills 10            # ~15 min on 2 shared cores (see README, "Soak check")
    python benchmarks/soak.py --kills 2 --reference <a finished smoke work dir>     # what the test suite runs

Local and bounded: an uninterrupted reference grid is run first (or taken from ``--reference``), then the same grid
is started in a fresh folder with the reference's model cache and killed with SIGKILL (the whole process group:
snakemake and its train jobs, as a lost node would) after a random delay, unlocked and started again, ``--kills``
times in all. When a start finishes the grid before its kill comes, the grid is checked and a new round begins in
a fresh folder; at most ``--max-starts`` starts are made. The last round is then run to the end. Every finished
round must give:

* the tables the reference gives (every ``tables/*.csv`` but ``cost.csv``, which holds wall times);
* each run's ``metrics.csv`` (without its ``time/`` columns) and ``eval.csv``, equal to the reference's;
* in MLflow: one active run per run name, FINISHED, with no metric logged twice for a step.

Exit status 0 when every round matches, 1 otherwise (the differences are printed).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def snakemake_cmd(work: Path, profile: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(work),
            "--cores", "2", "--config", f"profile={profile}", *extra]


def environment() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


def prepare(work: Path, models: Path | None) -> None:
    """A fresh grid folder: the profiles, and (for the killed grids) the reference's model cache."""
    if work.exists():
        shutil.rmtree(work)
    (work / "results").mkdir(parents=True)
    shutil.copytree(ROOT / "config", work / "config")
    if models is not None:
        (work / "results" / "models").symlink_to(models.resolve(), target_is_directory=True)


def run_to_end(work: Path, profile: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(snakemake_cmd(work, profile), env=environment(), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"snakemake failed in {work}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def start_and_kill(work: Path, profile: str, delay: float) -> bool:
    """Start the grid and SIGKILL it after ``delay`` s; True if it was killed, False if it finished first."""
    with open(work / "soak_snakemake.log", "a") as log:
        proc = subprocess.Popen(snakemake_cmd(work, profile), env=environment(), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            subprocess.run(snakemake_cmd(work, profile, "--unlock"), env=environment(), capture_output=True)
            return True
    if code != 0:
        raise RuntimeError(f"snakemake exited {code} in {work} before its kill; see {work / 'soak_snakemake.log'}")
    return False


def compare(reference: Path, work: Path, profile: str) -> list[str]:
    """Differences between a finished grid and the reference (empty = equal)."""
    problems = []
    ref_tables, tables = reference / "results" / profile / "tables", work / "results" / profile / "tables"
    names = sorted(p.name for p in ref_tables.glob("*.csv") if p.name != "cost.csv")
    if not names:
        problems.append(f"the reference {ref_tables} holds no tables")
    for name in names:
        problems += _frames_differ(ref_tables / name, tables / name)
    ref_runs = reference / "results" / profile / "runs"
    for done in sorted(ref_runs.glob("*/*/seed*/done.json")):
        key = done.parent.relative_to(ref_runs)
        for name in ("metrics.csv", "eval.csv"):
            problems += _frames_differ(done.parent / name, work / "results" / profile / "runs" / key / name)
    return problems + mlflow_problems(work)


def _frames_differ(expected: Path, got: Path) -> list[str]:
    if not got.exists():
        return [f"{got} is missing"]
    a, b = pd.read_csv(expected), pd.read_csv(got)
    keep = [c for c in a.columns if not c.startswith("time/")]
    try:
        pd.testing.assert_frame_equal(a[keep], b[[c for c in keep if c in b.columns]], check_exact=True)
    except AssertionError as err:
        return [f"{got} differs from {expected}: {str(err).splitlines()[0:3]}"]
    return []


def mlflow_problems(work: Path) -> list[str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{work / 'results' / 'mlflow.db'}")
    problems, names = [], {}
    for experiment in client.search_experiments():
        for run in client.search_runs([experiment.experiment_id]):
            names.setdefault(run.info.run_name, []).append(run)
    for name, runs in names.items():
        if len(runs) != 1 or runs[0].info.status != "FINISHED":
            problems.append(f"MLflow: {name} has {[(r.info.run_id[:8], r.info.status) for r in runs]} active runs, "
                            f"expected one FINISHED")
        for run in runs:
            for key in run.data.metrics:
                steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
                if len(steps) != len(set(steps)):
                    problems.append(f"MLflow: {name} logged {key} twice for a step: {sorted(steps)}")
    return problems


def reference_window(reference: Path, profile: str) -> float:
    """How long one uninterrupted grid takes: measured (soak_reference.json), else from the runs' wall times."""
    record = reference / "soak_reference.json"
    if record.exists():
        return json.loads(record.read_text())["wall_s"]
    walls = [json.loads(p.read_text()).get("wall_time_s", 0) for p in
             (reference / "results" / profile / "runs").glob("*/*/seed*/done.json")]
    return max(walls, default=30.0) + 15.0  # the runs train in parallel; snakemake starts in ~10 s


def soak(args) -> int:
    rng = random.Random(args.seed)
    base = Path(args.work or tempfile.mkdtemp(prefix="soak-"))
    reference = Path(args.reference) if args.reference else base / "reference"
    if not args.reference:
        prepare(reference, None)
        wall = run_to_end(reference, args.profile)
        (reference / "soak_reference.json").write_text(json.dumps({"wall_s": wall}))
        print(f"reference grid: {wall:.0f} s")
    window = args.window or reference_window(reference, args.profile)
    models = reference / "results" / "models"
    kills = starts = rounds = 0
    problems: list[str] = []
    work = base / "killed"
    prepare(work, models)
    while kills < args.kills and starts < args.max_starts:
        delay = rng.uniform(1.0, window)
        starts += 1
        if start_and_kill(work, args.profile, delay):
            kills += 1
            print(f"start {starts}: killed after {delay:.1f} s (kill {kills}/{args.kills})", flush=True)
            continue
        rounds += 1
        print(f"start {starts}: the grid finished within {delay:.1f} s; checking round {rounds}", flush=True)
        problems += compare(reference, work, args.profile)
        prepare(work, models)
    run_to_end(work, args.profile)
    rounds += 1
    problems += compare(reference, work, args.profile)
    summary = {"kills": kills, "starts": starts + 1, "rounds_checked": rounds, "window_s": round(window, 1),
               "equal_to_reference": not problems, "work": str(base)}
    print(json.dumps(summary))
    for problem in problems:
        print("  " + problem)
    if kills < args.kills:
        print(f"only {kills} of {args.kills} kills landed within {args.max_starts} starts", file=sys.stderr)
        return 1
    return 0 if not problems else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs of the grid in all (default 10)")
    parser.add_argument("--profile", default="smoke", help="the grid to soak (default smoke)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill delays")
    parser.add_argument("--reference", default=None, help="a finished, uninterrupted grid's work folder to compare with")
    parser.add_argument("--work", default=None, help="where the grids run (default: a new temporary folder)")
    parser.add_argument("--window", type=float, default=None,
                        help="kill delays are uniform in [1, WINDOW] s (default: the reference grid's wall time)")
    parser.add_argument("--max-starts", type=int, default=None, help="bound on grid starts (default 3 × kills + 3)")
    args = parser.parse_args()
    args.max_starts = args.max_starts or 3 * args.kills + 3
    return soak(args)


if __name__ == "__main__":
    sys.exit(main())
