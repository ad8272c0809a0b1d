"""MLflow logging: one experiment per (profile, benchmark), one run per (method, benchmark, seed).

The default store is ``sqlite:///results/mlflow.db`` with artifacts under ``results/mlartifacts`` (an explicit
root, so artifacts never land in the working directory). On a cluster the runs log to an ``mlflow server`` by
its URI instead (sqlite's locking is not safe over shared storage): ``tracking.uri`` may name an environment
variable, ``${MLFLOW_TRACKING_URI:-sqlite:///results/mlflow.db}``, so one profile serves both, and a server that
cannot be reached stops the run at start-up (:func:`check_store`). The MLflow run id is kept in the run folder so
that a resumed run keeps logging to the same MLflow run.
"""
from __future__ import annotations

import math
import os
import re
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Mapping

from harness.records import mlflow_runs

RUN_ID_FILE = "mlflow_run_id"
# MLflow 3's UI opens an experiment by its kind; untagged ones open on the GenAI overview ("Traces 0")
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
_ENV_REF = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def resolve_uri(uri: str, environ: Mapping[str, str] | None = None) -> str:
    """Expand ``${VAR}`` and ``${VAR:-default}`` in a tracking URI (how cluster runs find the server)."""
    environ = os.environ if environ is None else environ

    def value(match: re.Match) -> str:
        name, default = match.group(1), match.group(2)
        if environ.get(name):
            return environ[name]
        if default is None:
            raise ValueError(f"tracking.uri {uri!r} needs ${name}, which is not set; export it (e.g. "
                             f"{name}=http://<head node>:5000) or give a default: ${{{name}:-sqlite:///results/mlflow.db}}")
        return default

    return _ENV_REF.sub(value, uri)


def experiment_name(profile: str, benchmark: str) -> str:
    """``paper/alfworld``: a smoke or tiny run never lands beside the paper runs."""
    return f"{profile}/{benchmark}"


def run_labels(cfg, protocol: dict) -> dict[str, Any]:
    """The experiment, name, params and tags of a run's MLflow run, the same whoever opens it: the engine, or
    ``harness sync`` for a folder copied from another machine's store (``cfg`` a RunConfig, ``protocol`` its record)."""
    from harness.config import to_dict

    return {"experiment": experiment_name(cfg.profile, cfg.benchmark), "run_name": cfg.name,
            "params": to_dict(cfg) | {"method_options": protocol["method"]["options"]},
            "tags": {"protocol_sha256": protocol.get("sha256", ""), "git_commit": str(protocol.get("git_commit")),
                     "method": cfg.method.name, "method_label": cfg.method_label, "profile": cfg.profile}}


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def check_store(tracking_cfg, timeout: float = 10.0) -> str:
    """The resolved URI, after making sure a tracking server answers (before any model is built or trained);
    MLflow's own client would retry an unreachable server for minutes before failing mid-run."""
    uri = resolve_uri(tracking_cfg.uri)
    if not tracking_cfg.enabled:
        return uri
    if is_server(uri):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as reply:
                reply.read()
        except (urllib.error.URLError, OSError) as err:
            raise ConnectionError(f"the MLflow tracking server {uri} does not answer ({err}); start it on the head "
                                  "node (README: tracking at cluster scale) or point tracking.uri / "
                                  "MLFLOW_TRACKING_URI at a running one") from None
    elif uri.startswith("sqlite:") and os.environ.get("SLURM_JOB_ID"):
        print(f"warning: this SLURM job logs to the sqlite file {uri}; on shared storage sqlite's locking is not "
              "safe for parallel jobs: run an mlflow server and export MLFLOW_TRACKING_URI (README)", file=sys.stderr)
    return uri


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


_HTTP_KEYS = ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")
_USER_HTTP = {key: os.environ.get(key) for key in _HTTP_KEYS}  # this environment's own settings


def _http_settings(short_timeout_s: float | None) -> None:
    """MLflow reads its request retries and timeout from the environment at every request: the environment's own
    settings (``None``), or a single attempt of at most ``short_timeout_s`` for a running run's sender thread."""
    values = _USER_HTTP if short_timeout_s is None else {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(max(1, math.ceil(short_timeout_s)))}
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


class NullTracker:
    """Used when tracking is disabled: the per-run csv files still hold everything."""

    run_id = None

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...
    def log_artifact(self, path: Path) -> None: ...
    def resume_from(self, next_step: int) -> None: ...

    def end(self, status: str = "FINISHED", flush_timeout_s: float = 0.0) -> dict:
        return {}


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
    """Direct MLflow calls (made by :class:`harness.records.outbox.BufferedTracker`'s thread during a run)."""

    def __init__(self, uri: str, artifact_root: str, experiment: str, run_name: str, run_dir: Path,
                 params: Mapping[str, Any], tags: Mapping[str, str], replaces: str | None = None,
                 request_timeout_s: float = 10.0, log=print):
        self.uri = uri = resolve_uri(uri)
        if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
            Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        with _store_lock(uri):
            self._connect(uri, request_timeout_s)
            experiment_id = self._experiment_id(experiment, artifact_root)
        id_file = run_dir / RUN_ID_FILE
        recorded = id_file.read_text().strip() if id_file.exists() else None
        if recorded and not self.holds(recorded):
            # the folder was moved to another store, or the store was replaced: the folder's journal is the record,
            # so a new MLflow run opens here and the resume backfills every step from it (BufferedTracker.resume_from)
            log(f"tracking: {uri} holds no MLflow run {recorded} (the id in {id_file}); the run folder was moved or "
                f"the store replaced, so a new MLflow run is opened and filled from the folder's journal")
            recorded = None
        if recorded:  # resume: continue the same MLflow run
            self.run_id = recorded
            self.client.update_run(self.run_id, status="RUNNING")
            self.refresh_logged()
        else:
            folder = str(Path(run_dir).resolve())
            run = self.client.create_run(experiment_id, run_name=run_name,
                                         tags={**tags, mlflow_runs.RUN_DIR_TAG: folder})
            self.run_id = run.info.run_id
            id_file.write_text(self.run_id)
            self.logged = {}
            mlflow_runs.archive_replaced(self.client, experiment_id, folder, self.run_id, replaces)
            self._log_params(params)
        if is_server(uri):  # from now on one short attempt per request: retries happen off the training path
            _http_settings(request_timeout_s)

    def holds(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_run(run_id)
        except MlflowException as err:
            if err.error_code == "RESOURCE_DOES_NOT_EXIST":
                return False
            raise
        return True

    @classmethod
    def attach(cls, uri: str, run_id: str, request_timeout_s: float = 10.0) -> "MlflowTracker":
        """An existing run, to backfill (``python -m harness sync``); LookupError when the store does not hold it."""
        self = cls.__new__(cls)
        self.uri, self.run_id = resolve_uri(uri), run_id
        self._connect(self.uri, request_timeout_s)
        if not self.holds(run_id):
            raise LookupError(f"{self.uri} holds no MLflow run {run_id}")
        self.refresh_logged()
        return self

    def _connect(self, uri: str, request_timeout_s: float) -> None:
        from mlflow.tracking import MlflowClient

        self.request_timeout_s = request_timeout_s
        _http_settings(None)  # opening a run or a backfill: MLflow's own patience (the start-up check ran first)
        self.client = MlflowClient(tracking_uri=uri)

    def refresh_logged(self) -> None:
        """Per metric, the last step the store holds (after an outage a timed-out request may have landed)."""
        self.logged = mlflow_runs.logged_steps(self.client, self.run_id)

    def _experiment_id(self, name: str, artifact_root: str) -> str:
        experiment = self.client.get_experiment_by_name(name)
        if experiment is None:
            # a server stores artifacts where it was told to (--artifacts-destination); a local store under the root
            location = None if is_server(self.uri) else (Path(artifact_root).resolve() / name).as_uri()
            try:
                return self.client.create_experiment(name, artifact_location=location, tags=EXPERIMENT_KIND)
            except Exception:  # created concurrently by a parallel job
                experiment = self.client.get_experiment_by_name(name)
        for key, value in EXPERIMENT_KIND.items():  # experiments made before the tag existed
            if experiment.tags.get(key) != value:
                self.client.set_experiment_tag(experiment.experiment_id, key, value)
        return experiment.experiment_id

    def _log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in flatten(params).items()]
        for start in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[start:start + 100])

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> int:
        """Log the (metric, step) pairs the store does not hold yet; returns how many were sent."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k.replace("@", "_"), float(v), now, step) for k, v in metrics.items()
                 if v is not None and math.isfinite(float(v)) and step > self.logged.get(k.replace("@", "_"), -1)]
        for start in range(0, len(items), 500):
            self.client.log_batch(self.run_id, metrics=items[start:start + 500])
            for item in items[start:start + 500]:
                self.logged[item.key] = step
        return len(items)

    def log_artifact(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def end(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status=status)

    def close(self) -> None:
        """The run is over: MLflow requests get this environment's own retry settings back."""
        _http_settings(None)


def make_tracker(tracking_cfg, *, experiment: str, run_name: str, run_dir: Path, params: Mapping[str, Any],
                 tags: Mapping[str, str], replaces: str | None = None, log=print):
    """The run's tracker: created here against the store (the start-up check found it answering), then buffered
    so that no later call waits for the store (harness/records/outbox.py)."""
    if not tracking_cfg.enabled:
        return NullTracker()
    from harness.records.outbox import BufferedTracker

    tracker = MlflowTracker(tracking_cfg.uri, tracking_cfg.artifact_root, experiment, run_name, run_dir, params, tags,
                            replaces, request_timeout_s=tracking_cfg.request_timeout_s, log=log)
    return BufferedTracker(tracker, run_dir, retry_max_s=tracking_cfg.retry_max_s, log=log)
