"""Backfilling MLflow from a run folder (``python -m harness sync <run folder>``): what an outage of the tracking
server left unsent reaches the store from the folder's journal (``harness/records/outbox.py``), without a pair
logged twice."""
from __future__ import annotations

import json
import time
from pathlib import Path

from harness.records.outbox import OUTBOX, SYNCED, Journal
from harness.records.run_files import DONE, EVAL, METRICS, PROTOCOL
from harness.records.tracking import RUN_ID_FILE, MlflowTracker


def needs_sync(run_dir: Path) -> bool:
    """done.json names unsent calls and no sync has completed since."""
    done = Path(run_dir) / DONE
    if not done.exists() or (Path(run_dir) / SYNCED).exists():
        return False
    return "mlflow_unsent" in json.loads(done.read_text())


def sync(run_dir: Path, uri: str | None = None, request_timeout_s: float = 10.0, log=print) -> dict:
    """Backfill a run's MLflow run from its folder: every journalled (metric, step) the store lacks, the run
    files as artifacts, and FINISHED for a finished run. Idempotent; ``uri`` defaults to the folder's protocol's
    ``tracking.uri`` (``${MLFLOW_TRACKING_URI:-...}`` read from this environment)."""
    run_dir = Path(run_dir)
    id_file = run_dir / RUN_ID_FILE
    if not id_file.exists():
        raise FileNotFoundError(f"{run_dir} has no {RUN_ID_FILE}: the run never opened an MLflow run to fill")
    if uri is None:
        uri = json.loads((run_dir / PROTOCOL).read_text())["config"]["tracking"]["uri"]
    tracker = MlflowTracker.attach(uri, id_file.read_text().strip(), request_timeout_s)
    entries = Journal(run_dir / OUTBOX).entries()
    sent = sum(tracker.log_metrics(entry["metrics"], entry["step"]) for entry in entries)
    present = {a.path for a in tracker.client.list_artifacts(tracker.run_id)}
    artifacts = [name for name in (PROTOCOL, METRICS, EVAL) if (run_dir / name).exists() and name not in present]
    for name in artifacts:
        tracker.log_artifact(run_dir / name)
    finished = (run_dir / DONE).exists()
    if finished:
        tracker.end("FINISHED")
        (run_dir / SYNCED).write_text(json.dumps({"run_id": tracker.run_id, "metrics_sent": sent,
                                                  "synced_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
    report = {"run_id": tracker.run_id, "uri": tracker.uri, "journal_steps": len(entries), "metrics_sent": sent,
              "artifacts_sent": artifacts, "status": "FINISHED" if finished else "unchanged (the run is unfinished)"}
    log(f"{run_dir}: MLflow run {tracker.run_id} backfilled: {sent} metric value(s), artifacts {artifacts}")
    return report
