"""Tracking off the training path: every MLflow call goes through a buffer that a background thread empties.

The training loop only appends to the run folder's ``mlflow_outbox.jsonl`` (one line per logged step: the source a
backfill reads) and to an in-memory queue, and goes on. The sender thread sends the queue in order with short
requests (``tracking.request_timeout_s``, no MLflow retries). When the server does not answer it waits 1, 2, 4, ...
s (at most ``tracking.retry_max_s``) and tries again, as long as it takes; before it resends, it reads back which
(metric, step) pairs the server holds (a request that timed out may still have been stored), so no pair is logged
twice. A finishing run waits ``tracking.flush_timeout_s`` for the queue to empty; what is left is named in
``done.json`` and sent later by ``python -m harness sync <run folder>`` (``harness.records.backfill``) or the run's
next start.
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from pathlib import Path

OUTBOX = "mlflow_outbox.jsonl"
SYNCED = "mlflow_synced.json"


class Journal:
    """The metrics a run handed to its tracker, one JSON line per call: ``{"step": s, "metrics": {...}}``."""

    def __init__(self, path: Path):
        self.path = path

    def append(self, step: int, metrics: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, "metrics": metrics}, default=float) + "\n")

    def entries(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # the torn last line of a kill; the resumed run logs that step again
                break
        return out

    def truncate_after(self, step: int) -> list[dict]:
        kept = [e for e in self.entries() if e["step"] <= step]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(e) + "\n" for e in kept))
        tmp.replace(self.path)
        return kept


class BufferedTracker:
    """Wraps a :class:`harness.records.tracking.MlflowTracker`; same calls, none of which waits for the server."""

    def __init__(self, tracker, run_dir: Path, retry_max_s: float = 60.0, log=print):
        self.tracker, self.run_id = tracker, tracker.run_id
        self.journal = Journal(Path(run_dir) / OUTBOX)
        self.retry_max_s, self.log = retry_max_s, log
        self.queue: deque = deque()
        self.cond = threading.Condition()
        self.closing = False
        self.outages = 0
        self.thread = threading.Thread(target=self._send_all, name="mlflow-sender", daemon=True)
        self.thread.start()

    # ------------------------------------------------------------------ the training thread's side
    def log_metrics(self, metrics: dict, step: int) -> None:
        metrics = {k: float(v) for k, v in metrics.items() if v is not None}
        self.journal.append(step, metrics)
        self._put(("metrics", step, metrics))

    def log_artifact(self, path: Path) -> None:
        self._put(("artifact", Path(path)))

    def resume_from(self, next_step: int) -> None:
        """A resume: drop journal lines after the checkpoint (they are recomputed) and queue the rest; the sender
        skips what the server already holds, so this backfills what an earlier outage left unsent."""
        for entry in self.journal.truncate_after(next_step - 1):
            self._put(("metrics", entry["step"], entry["metrics"]))

    def end(self, status: str = "FINISHED", flush_timeout_s: float = 60.0) -> dict:
        """Queue the terminal status, wait up to ``flush_timeout_s`` for the queue to empty; returns ``{}`` when
        everything reached the server, else ``{"mlflow_unsent": {...}}`` (what done.json records)."""
        self._put(("end", status))
        deadline = time.monotonic() + flush_timeout_s
        with self.cond:
            while self.queue and time.monotonic() < deadline:
                self.cond.wait(timeout=min(1.0, max(deadline - time.monotonic(), 0.01)))
            self.closing = True
            self.cond.notify_all()
            left = list(self.queue)
        self.thread.join(timeout=self.tracker_timeout() + 5)
        self.tracker.close()
        return unsent_record(left, self.run_id, self.journal.path.parent) if left else {}

    def tracker_timeout(self) -> float:
        return getattr(self.tracker, "request_timeout_s", 10.0)

    def _put(self, item) -> None:
        with self.cond:
            self.queue.append(item)
            self.cond.notify_all()

    # ------------------------------------------------------------------ the sender thread
    def _send_all(self) -> None:
        wait, failing = 1.0, False
        while True:
            with self.cond:
                while not self.queue and not self.closing:
                    self.cond.wait()
                if self.closing:
                    return
                item = self.queue[0]
            try:
                if failing:  # back from an outage: read back what the server stored before resending
                    self.tracker.refresh_logged()
                self._send(item)
            except Exception as err:  # noqa: BLE001 - any failure to reach the store is retried, never raised
                if not failing:
                    self.outages += 1
                    self.log(f"tracking: the MLflow store does not answer ({type(err).__name__}); training goes "
                             f"on, {len(self.queue)} call(s) buffered, retrying in the background")
                failing = True
                with self.cond:
                    self.cond.wait_for(lambda: self.closing, timeout=wait)
                wait = min(wait * 2, self.retry_max_s)
                continue
            if failing:
                self.log("tracking: the MLflow store answers again; sending the buffered calls")
            wait, failing = 1.0, False
            with self.cond:
                self.queue.popleft()
                self.cond.notify_all()

    def _send(self, item) -> None:
        kind = item[0]
        if kind == "metrics":
            self.tracker.log_metrics(item[2], item[1])
        elif kind == "artifact":
            self.tracker.log_artifact(item[1])
        else:
            self.tracker.end(item[1])


def unsent_record(items: list, run_id: str | None, run_dir: Path) -> dict:
    steps = sorted({item[1] for item in items if item[0] == "metrics"})
    return {"mlflow_unsent": {
        "run_id": run_id, "metric_steps": len(steps), "first_step": steps[0] if steps else None,
        "last_step": steps[-1] if steps else None,
        "artifacts": [item[1].name for item in items if item[0] == "artifact"],
        "status": next((item[1] for item in items if item[0] == "end"), None),
        "fix": f"python -m harness sync {run_dir}"}}

