"""What to do with a run folder, decided before anything is loaded or written.

``plan_run`` only reads: a finished run under this protocol is left alone; a finished run under another protocol
is an error naming the keys that differ; a folder without a checkpoint (a failed start, a kill before the first
checkpoint) is started over; a folder with one is resumed (``--resume``) when its protocol is this config's.
``start_run_dir`` is the first write, made only once the model, backend and everything else have been built, so a
start that fails leaves nothing behind that blocks the corrected command.
"""
from __future__ import annotations

import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness.records.identity import differences, read_protocol, same_protocol
from harness.records.protocol import write_json
from harness.records.run_files import CHECKPOINT, DONE, PROTOCOL

RUN_ID_FILE = "mlflow_run_id"  # the MLflow run of the folder (harness.records.tracking writes it)


class RunStateError(RuntimeError):
    """A run folder's state forbids the requested start; the message says what to pass instead."""


class PartialRunError(RunStateError):
    pass


class RunIdentityError(RunStateError):
    pass


class CorruptCheckpointError(RunStateError):
    pass


class UnsafeCheckpointError(RunStateError):
    """A checkpoint holds Python objects other than tensors and plain data: loading it could run code."""


@dataclass
class RunPlan:
    action: Literal["skip", "fresh", "resume"]
    reason: str
    state: dict | None = None  # the checkpoint to resume from, read (memory-mapped) before any model loads
    previous_mlflow_run: str | None = None  # the MLflow run a fresh start replaces


def plan_run(run_dir: Path, protocol: dict, resume: bool, force: bool, restart_changed: bool = False) -> RunPlan:
    previous = _mlflow_run_id(run_dir)
    if force:
        return RunPlan("fresh", "--force", previous_mlflow_run=previous)
    if (run_dir / DONE).exists():
        changed = _changes(run_dir, protocol)
        if not changed:
            return RunPlan("skip", f"already finished in {run_dir} (done.json) under this protocol; nothing to do. "
                                   "Pass --force to redo it.")
        if restart_changed:
            return RunPlan("fresh", "finished under another protocol", previous_mlflow_run=previous)
        raise RunIdentityError(
            f"{run_dir} holds a run finished under another protocol than this config's:\n  " + "\n  ".join(changed)
            + "\nIts result stands for that protocol only. Pass --force to replace it (the old run is deleted), or "
              "write the new run to another folder with output_dir=<folder>.")
    if not (run_dir / CHECKPOINT).exists():
        return RunPlan("fresh", "no checkpoint to resume from", previous_mlflow_run=previous)
    if not resume:
        raise PartialRunError(f"{run_dir} holds an unfinished run with a checkpoint. Pass --resume to continue it "
                              "from its last checkpoint, or --force to delete it and start over.")
    changed = _changes(run_dir, protocol)
    if changed:
        if restart_changed:
            return RunPlan("fresh", "started under another protocol", previous_mlflow_run=previous)
        raise RunIdentityError(
            f"{run_dir} holds an unfinished run started under another protocol than this config's:\n  "
            + "\n  ".join(changed) + "\nResume it with the config it was started with, pass --force to start over, "
                                     "or write the new run to another folder with output_dir=<folder>.")
    return RunPlan("resume", "resuming", state=load_checkpoint(run_dir / CHECKPOINT))


def _changes(run_dir: Path, protocol: dict) -> list[str]:
    old = read_protocol(run_dir / PROTOCOL)
    if old is None:
        return [f"{PROTOCOL}: missing or unreadable, so the run's protocol is unknown"]
    return [] if same_protocol(old, protocol) else (differences(old, protocol) or ["the protocol hash"])


def _mlflow_run_id(run_dir: Path) -> str | None:
    path = run_dir / RUN_ID_FILE
    return path.read_text().strip() or None if path.exists() else None


def load_checkpoint(path: Path) -> dict:
    """The checkpoint's state, memory-mapped (no copy in RAM until used); a damaged file is a named error.

    Loaded with ``weights_only=True``: tensors, numbers, strings and containers only (what :mod:`checkpoint` writes:
    the step, the weights, AdamW's state and param groups), since a run folder on a shared filesystem is not a
    trusted input and a full unpickle runs whatever a crafted file names."""
    import pickle

    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        missing = {"next_step", "model", "optimizer"} - set(state)
    except pickle.UnpicklingError as err:
        if "weights only load failed" not in str(err).lower():
            raise CorruptCheckpointError(_corrupt(path, f"UnpicklingError: {str(err).splitlines()[0][:200]}"))
        raise UnsafeCheckpointError(
            f"{path} is refused: it holds Python objects other than tensors and plain data ({_unsupported(err)}), "
            "which a checkpoint written by this harness never does, and loading it could run code. Delete it (the run "
            "starts over from step 0, or pass --force) and check who can write to the run folder") from None
    except Exception as err:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for a damaged file
        raise CorruptCheckpointError(_corrupt(path, f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"))
    if missing:
        raise CorruptCheckpointError(_corrupt(path, f"it lacks {sorted(missing)}"))
    return state


def _unsupported(err: Exception) -> str:
    """The global torch's weights-only unpickler refused, as it names it (``GLOBAL posix.system``)."""
    for line in str(err).splitlines():
        if "Unsupported global" in line or "GLOBAL" in line:
            return line.strip()[:200]
    return str(err).splitlines()[0][:200]


def _corrupt(path: Path, why: str) -> str:
    return (f"{path} cannot be read ({why}): it is truncated or corrupt. A run keeps only its latest checkpoint, so "
            f"there is no earlier one to go back to: pass --force to start the run over, or delete {path} and run "
            f"the same command again (a run folder without a checkpoint starts from step 0).")


def start_run_dir(run_dir: Path, plan: RunPlan, protocol: dict) -> None:
    """The first write to the run folder: a fresh start replaces what was there; a resume keeps it."""
    if plan.action == "fresh" and run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if plan.action == "fresh":
        write_json(run_dir / PROTOCOL, protocol)


@contextmanager
def failure_is_recorded(tracking_cfg, run_dir: Path):
    """Any failure while a run opens marks its MLflow run FAILED: the one being opened, or else the folder's
    earlier run, if a kill left it RUNNING. ``guard.tracker`` is set once the run's tracker exists."""
    guard = _Guard()
    try:
        yield guard
    except BaseException:
        if guard.tracker is not None:
            guard.tracker.end("FAILED")
        elif tracking_cfg.enabled:
            from harness.records.mlflow_runs import mark_failed_if_running

            mark_failed_if_running(tracking_cfg.uri, _mlflow_run_id(run_dir))
        raise


class _Guard:
    tracker = None
