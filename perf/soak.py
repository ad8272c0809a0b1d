"""Soak check: interrupt the smoke grid at random moments, resume it each time, and compare with an uninterrupted grid.

    python -m perf.soak --kills 10            # SIGKILL and SIGTERM rounds, alternating (docs/recovery.md)
    python -m perf.soak --kills 4 --server    # ... while an mlflow server goes away and comes back
    python -m perf.soak --kills 2 --reference <a finished smoke work dir>     # what the test suite runs

Local and bounded: an uninterrupted reference grid is run first (or taken from ``--reference``), then the same grid
is started in a fresh folder with the reference's model cache and interrupted after a random delay, ``--kills``
times in all, each time with a signal to the whole process group (snakemake and its train jobs), as a scheduler
does: SIGKILL (a lost node: the runs resume from their last checkpoint; the killed grid is unlocked) or SIGTERM
(preemption or a time limit: each run saves a checkpoint at the step it reached and exits 75, and must resume
from that step, not from its last periodic checkpoint; the soak profile sets ``train.checkpoint_every`` to
``--checkpoint-every``, 100 by default, so no periodic checkpoint hides the difference). With ``--server`` the runs
log to a local ``mlflow server`` that is stopped at a random moment of a start and started again
``--outage`` seconds later. When a start finishes the grid before its interruption, the grid is checked and a new
round begins in a fresh folder; at most ``--max-starts`` starts are made. The last round is then run to the end.
Every finished round must give:

* the tables the reference gives (every ``tables/*.csv`` but ``cost.csv``, which holds wall times);
* each run's ``metrics.csv`` (without its ``time/`` columns) and ``eval.csv``, equal to the reference's;
* in MLflow: one active run per run name, FINISHED, with every step's metrics and none logged twice for a step
  (after ``python -m harness sync`` of the runs whose done.json names calls an outage left unsent).

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
import threading
import time
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXIT_REQUEUE = 75  # harness.engine.interrupt.EXIT_REQUEUE: a run that saved on a signal


def snakemake_cmd(work: Path, profile: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(work),
            "--cores", "2", "--config", f"profile={profile}", *extra]


def environment(uri: str | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    if uri:
        env["MLFLOW_TRACKING_URI"] = uri
    return env


def prepare(work: Path, models: Path | None, profile: str, checkpoint_every: int | None) -> None:
    """A fresh grid folder: the profiles (the soaked one with ``train.checkpoint_every``), and (for the interrupted
    grids) the reference's model cache."""
    if work.exists():
        shutil.rmtree(work)
    (work / "results").mkdir(parents=True)
    shutil.copytree(ROOT / "config", work / "config")
    path = work / "config" / f"{profile}.yaml"
    if checkpoint_every and path.exists():
        raw = yaml.safe_load(path.read_text())
        raw.setdefault("train", {})["checkpoint_every"] = checkpoint_every
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
    if models is not None:
        (work / "results" / "models").symlink_to(models.resolve(), target_is_directory=True)


def run_to_end(work: Path, profile: str, uri: str | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run(snakemake_cmd(work, profile), env=environment(uri), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"snakemake failed in {work}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def start_and_interrupt(work: Path, profile: str, delay: float, how: signal.Signals, uri: str | None = None) -> bool:
    """Start the grid and send ``how`` to its process group after ``delay`` s; True if it was interrupted, False if
    it finished first. After a SIGTERM every process of the group is waited for (the runs save, then exit)."""
    with open(work / "soak_snakemake.log", "a") as log:
        proc = subprocess.Popen(snakemake_cmd(work, profile), env=environment(uri), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, how)
            proc.wait()
            _wait_for_group(proc.pid, timeout=180 if how == signal.SIGTERM else 10)
            subprocess.run(snakemake_cmd(work, profile, "--unlock"), env=environment(uri), capture_output=True)
            return True
    if code != 0:
        raise RuntimeError(f"snakemake exited {code} in {work} before its interruption; see "
                           f"{work / 'soak_snakemake.log'}")
    return False


def _wait_for_group(pgid: int, timeout: float) -> None:
    """Until no process of the group is left (a train job saving on SIGTERM outlives snakemake's exit)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(pgid, signal.SIGKILL)
    raise RuntimeError(f"process group {pgid} was still alive {timeout:.0f} s after its signal (SIGKILLed)")


def signal_saves(work: Path, profile: str) -> tuple[int, list[str]]:
    """After a SIGTERM: each run whose log says it stopped on the signal must hold a checkpoint at the step its
    metrics reached (the signal's step), not at an earlier periodic one. Returns (runs checked, problems); a run
    the signal reached before its handler was installed (Python still importing) died as before and is skipped."""
    import torch

    checked, problems = 0, []
    for log in sorted((work / "results" / profile / "logs").glob("*/*/seed*.log")):
        run = work / "results" / profile / "runs" / log.parent.parent.name / log.parent.name / log.stem
        if "stopped by a signal" not in log.read_text(errors="replace") or (run / "done.json").exists():
            continue
        journal = run / "metrics.jsonl"
        reached = len([line for line in journal.read_text().splitlines() if line.strip()]) if journal.exists() else 0
        saved = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True, mmap=True)["next_step"]
        checked += 1
        if saved != reached:
            problems.append(f"{run}: checkpoint at step {saved} after SIGTERM, but {reached} steps were logged")
    return checked, problems


def compare(reference: Path, work: Path, profile: str, uri: str | None = None) -> list[str]:
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
    return problems + mlflow_problems(work, profile, uri)


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


def sync_unsent(work: Path, profile: str, uri: str | None) -> int:
    """``python -m harness sync`` for every finished run whose done.json names calls an outage left unsent."""
    count = 0
    for done in sorted((work / "results" / profile / "runs").glob("*/*/seed*/done.json")):
        if "mlflow_unsent" in json.loads(done.read_text()):
            subprocess.run([sys.executable, "-m", "harness", "sync", str(done.parent)], env=environment(uri),
                           cwd=work, capture_output=True, check=True)
            count += 1
    return count


def mlflow_problems(work: Path, profile: str = "smoke", uri: str | None = None) -> list[str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri or f"sqlite:///{work / 'results' / 'mlflow.db'}")
    problems, names = [], {}
    for experiment in client.search_experiments():
        for run in client.search_runs([experiment.experiment_id]):
            names.setdefault(run.info.run_name, []).append(run)
    steps_of = {json.loads(p.read_text())["run_name"]: json.loads(p.read_text())["steps"]
                for p in (work / "results" / profile / "runs").glob("*/*/seed*/done.json")}
    for name, runs in names.items():
        if len(runs) != 1 or runs[0].info.status != "FINISHED":
            problems.append(f"MLflow: {name} has {[(r.info.run_id[:8], r.info.status) for r in runs]} active runs, "
                            f"expected one FINISHED")
        for run in runs:
            for key in run.data.metrics:
                steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
                if len(steps) != len(set(steps)):
                    problems.append(f"MLflow: {name} logged {key} twice for a step: {sorted(steps)}")
                if key == "train/success" and name in steps_of and sorted(steps) != list(range(steps_of[name])):
                    problems.append(f"MLflow: {name} holds train/success for steps {sorted(steps)}, expected "
                                    f"0..{steps_of[name] - 1}")
    return problems


class Outages:
    """With ``--server``: a local mlflow server, stopped once per start while its runs train (a run's metrics
    journal grew during the start) and started again ``outage_s`` later, from a background thread, so the grid
    runs on meanwhile."""

    def __init__(self, root: Path, rng: random.Random, outage_s: float):
        from tests.mlflow_server import MlflowServer

        root.mkdir(parents=True, exist_ok=True)
        self.server, self.rng, self.outage_s, self.count = MlflowServer(root).start(), rng, outage_s, 0
        self.thread: threading.Thread | None = None
        self.cancel = threading.Event()

    @property
    def uri(self) -> str:
        return self.server.uri

    def during(self, runs: Path, window: float) -> None:
        """One outage within the next ``window`` s, once a run of ``runs`` has logged a step in this start."""
        self.wait()
        self.cancel.clear()
        self.thread = threading.Thread(target=self._outage, args=(runs, time.time(), window), daemon=True)
        self.thread.start()

    def _outage(self, runs: Path, since: float, window: float) -> None:
        while not any(p.stat().st_mtime > since for p in runs.glob("*/*/seed*/metrics.jsonl")):
            if self.cancel.wait(0.5) or time.time() > since + window:
                return
        if self.cancel.wait(self.rng.uniform(0.0, 5.0)):
            return
        self.server.stop()
        self.count += 1
        time.sleep(self.outage_s)
        self.server.start()

    def wait(self) -> None:
        """Until the server answers again (a check, or a grid that must start, needs it)."""
        self.cancel.set()
        if self.thread is not None:
            self.thread.join()
        if not self.server.answers():
            self.server.start()

    def close(self) -> None:
        self.wait()
        self.server.stop()


def refused_at_start_up(work: Path, profile: str) -> bool:
    """A failed start whose runs' logs all say the tracking server did not answer at start-up (harness's check)."""
    logs = [log.read_text(errors="replace") for log in (work / "results" / profile / "logs").glob("*/*/seed*.log")]
    failed = [text for text in logs if "error" in text.lower()]
    return bool(failed) and all("does not answer" in text for text in failed)


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
        prepare(reference, None, args.profile, args.checkpoint_every)
        wall = run_to_end(reference, args.profile)
        (reference / "soak_reference.json").write_text(json.dumps({"wall_s": wall}))
        print(f"reference grid: {wall:.0f} s")
    window = args.window or reference_window(reference, args.profile)
    models = reference / "results" / "models"
    outages = Outages(base / "mlflow_server", rng, args.outage) if args.server else None
    uri = outages.uri if outages else None
    counts = {"sigkill": 0, "sigterm": 0, "signal_saves_checked": 0, "refused_starts": 0, "synced_runs": 0}
    kills = starts = rounds = 0
    problems: list[str] = []
    work = base / "killed"
    prepare(work, models, args.profile, args.checkpoint_every)

    def check_round() -> None:
        nonlocal rounds
        if outages:
            outages.wait()
        rounds += 1
        counts["synced_runs"] += sync_unsent(work, args.profile, uri)
        problems.extend(compare(reference, work, args.profile, uri))

    try:
        while kills < args.kills and starts < args.max_starts:
            delay = rng.uniform(1.0, window)
            how = signal.SIGTERM if args.signal == "term" or (args.signal == "mixed" and kills % 2) else signal.SIGKILL
            starts += 1
            if outages:
                outages.during(work / "results" / args.profile / "runs", delay)
            try:
                interrupted = start_and_interrupt(work, args.profile, delay, how, uri)
            except RuntimeError:
                if not (outages and refused_at_start_up(work, args.profile)):
                    raise
                counts["refused_starts"] += 1  # a run started while the server was away: the start-up check
                print(f"start {starts}: a run refused to start (tracking server away)", flush=True)
                continue
            finally:
                if outages:
                    outages.cancel.set()  # no outage after the start is over
            if interrupted:
                kills += 1
                counts[how.name.lower()] += 1
                if how == signal.SIGTERM:
                    checked, found = signal_saves(work, args.profile)
                    counts["signal_saves_checked"] += checked
                    problems += found
                print(f"start {starts}: {how.name} after {delay:.1f} s (interruption {kills}/{args.kills})", flush=True)
                continue
            print(f"start {starts}: the grid finished within {delay:.1f} s; checking a round", flush=True)
            check_round()
            prepare(work, models, args.profile, args.checkpoint_every)
        if outages:
            outages.wait()
        run_to_end(work, args.profile, uri)
        check_round()
    finally:
        if outages:
            counts["server_outages"] = outages.count
            outages.close()
    summary = {"kills": kills, **counts, "starts": starts + 1, "rounds_checked": rounds, "window_s": round(window, 1),
               "equal_to_reference": not problems, "work": str(base)}
    print(json.dumps(summary))
    for problem in problems:
        print("  " + problem)
    if kills < args.kills:
        print(f"only {kills} of {args.kills} interruptions landed within {args.max_starts} starts", file=sys.stderr)
        return 1
    return 0 if not problems else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=10, help="interruptions of the grid in all (default 10)")
    parser.add_argument("--signal", choices=("mixed", "kill", "term"), default="mixed",
                        help="SIGKILL, SIGTERM, or both alternating, starting with SIGKILL (default mixed)")
    parser.add_argument("--checkpoint-every", type=int, default=100,
                        help="train.checkpoint_every of the soaked profile (default 100: only the signal saves)")
    parser.add_argument("--server", action="store_true",
                        help="log to a local mlflow server that goes away once a start (default: the sqlite file)")
    parser.add_argument("--outage", type=float, default=20.0, help="seconds each server outage lasts (default 20)")
    parser.add_argument("--profile", default="smoke", help="the grid to soak (default smoke)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the delays")
    parser.add_argument("--reference", default=None,
                        help="a finished, uninterrupted grid's work folder to compare with")
    parser.add_argument("--work", default=None, help="where the grids run (default: a new temporary folder)")
    parser.add_argument("--window", type=float, default=None,
                        help="delays are uniform in [1, WINDOW] s (default: the reference grid's wall time)")
    parser.add_argument("--max-starts", type=int, default=None, help="bound on grid starts (default 3 × kills + 3)")
    args = parser.parse_args()
    args.max_starts = args.max_starts or 3 * args.kills + 3
    return soak(args)


if __name__ == "__main__":
    sys.exit(main())
