"""Backfilling MLflow from a run folder (``python -m harness sync <run folder>``): what an outage of the tracking
server left unsent reaches the store from the folder's journal (``harness/records/outbox.py``), without a pair
logged twice."""
from __future__ import annotations

import json
import time
from pathlib import Path

from harness.records.identity import read_protocol
from harness.records.outbox import OUTBOX, SYNCED, Journal
from harness.records.run_files import DONE, EVAL, METRICS, PROTOCOL
from harness.records.tracking import RUN_ID_FILE, MlflowTracker, run_labels


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
        uri = folder_protocol(run_dir)["config"]["tracking"]["uri"]
    try:
        tracker = MlflowTracker.attach(uri, id_file.read_text().strip(), request_timeout_s)
    except LookupError:  # a folder copied from another machine's store: it gets a run of its own in this one
        tracker = open_like_the_engine(run_dir, folder_protocol(run_dir), uri, request_timeout_s, log)
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


def folder_protocol(run_dir: Path) -> dict:
    """The folder's protocol record, read only where sync needs it (the store's URI, or a new run's labels)."""
    record = read_protocol(run_dir / PROTOCOL)
    if record is None:
        raise FileNotFoundError(f"{run_dir / PROTOCOL} is missing or unreadable: pass --uri, and for a store that does "
                                f"not hold the run, restore the file from the run's copy")
    return record


def open_like_the_engine(run_dir: Path, record: dict, uri: str, request_timeout_s: float, log) -> MlflowTracker:
    """A new MLflow run for ``run_dir`` with the experiment, name, params and tags the engine gives a run
    (harness/engine/run.py), read from its protocol record; the folder's ``mlflow_run_id`` then names it."""
    from harness.config import config_from_dict

    cfg = config_from_dict(record["config"])
    labels = run_labels(cfg, record)
    return MlflowTracker(uri, cfg.tracking.artifact_root, labels["experiment"], labels["run_name"], run_dir,
                         labels["params"], labels["tags"], request_timeout_s=request_timeout_s, log=log)
