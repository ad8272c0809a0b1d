"""MLflow logging: one experiment per benchmark, one run per (method, benchmark, seed).

The default store is ``sqlite:///results/mlflow.db`` with artifacts under ``results/mlartifacts`` (an explicit
root, so artifacts never land in the working directory). The MLflow run id is kept in the run folder so that a
resumed run keeps logging to the same MLflow run.
"""
from __future__ import annotations

import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Mapping

from harness import mlflow_runs

RUN_ID_FILE = "mlflow_run_id"


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


class NullTracker:
    """Used when tracking is disabled: the per-run csv files still hold everything."""

    run_id = None

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...
    def log_artifact(self, path: Path) -> None: ...
    def end(self, status: str = "FINISHED") -> None: ...


@contextmanager
def _store_lock(uri: str):
    """Serialise the first touch of a sqlite store: parallel jobs of the workflow otherwise race to create its
    tables, and MLflow's schema migration fails in the loser ("expected to match one row ... 0 found")."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    import fcntl

    lock_path = Path(uri[len("sqlite:///"):] + ".lock")
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class MlflowTracker:
    def __init__(self, uri: str, artifact_root: str, experiment: str, run_name: str, run_dir: Path,
                 params: Mapping[str, Any], tags: Mapping[str, str], replaces: str | None = None):
        from mlflow.tracking import MlflowClient

        if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
            Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        with _store_lock(uri):
            self.client = MlflowClient(tracking_uri=uri)
            experiment_id = self._experiment_id(experiment, artifact_root)
        id_file = run_dir / RUN_ID_FILE
        if id_file.exists():  # resume: continue the same MLflow run
            self.run_id = id_file.read_text().strip()
            self.client.update_run(self.run_id, status="RUNNING")
            self.logged = mlflow_runs.logged_steps(self.client, self.run_id)
        else:
            folder = str(Path(run_dir).resolve())
            run = self.client.create_run(experiment_id, run_name=run_name,
                                         tags={**tags, mlflow_runs.RUN_DIR_TAG: folder})
            self.run_id = run.info.run_id
            id_file.write_text(self.run_id)
            self.logged = {}
            mlflow_runs.archive_replaced(self.client, experiment_id, folder, self.run_id, replaces)
            self._log_params(params)

    def _experiment_id(self, name: str, artifact_root: str) -> str:
        experiment = self.client.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        location = (Path(artifact_root).resolve() / name).as_uri()
        try:
            return self.client.create_experiment(name, artifact_location=location)
        except Exception:  # created concurrently by a parallel job
            return self.client.get_experiment_by_name(name).experiment_id

    def _log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in flatten(params).items()]
        for start in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[start:start + 100])

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k.replace("@", "_"), float(v), now, step) for k, v in metrics.items()
                 if v is not None and math.isfinite(float(v)) and step > self.logged.get(k.replace("@", "_"), -1)]
        for start in range(0, len(items), 500):
            self.client.log_batch(self.run_id, metrics=items[start:start + 500])

    def log_artifact(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def end(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status=status)


def make_tracker(tracking_cfg, *, experiment: str, run_name: str, run_dir: Path, params: Mapping[str, Any],
                 tags: Mapping[str, str], replaces: str | None = None):
    if not tracking_cfg.enabled:
        return NullTracker()
    return MlflowTracker(tracking_cfg.uri, tracking_cfg.artifact_root, experiment, run_name, run_dir, params, tags,
                         replaces)
