"""A real ``mlflow server`` on 127.0.0.1 (sqlite backend store) that a test can stop and start again on the same
port and store: a head node's tracking server going away and coming back."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MlflowServer:
    def __init__(self, root: Path):
        self.root, self.port = Path(root), free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180.0) -> "MlflowServer":
        """Start it and wait until /health answers (a fresh store migrates its schema first: ~40 s on 2 busy cores)."""
        log = open(self.root / "server.log", "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--backend-store-uri", f"sqlite:///{self.root / 'store.db'}",
             "--artifacts-destination", str(self.root / "artifacts"), "--workers", "1"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.time() + timeout
        while not self.answers():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"mlflow server did not start: {(self.root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        return self

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        """Its whole process group (the gunicorn/uvicorn workers too), so the port is free again."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def logged_pairs(uri: str, run_id: str) -> list[tuple[str, int]]:
    """Every (metric, step) the store holds for the run, with repeats."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    return [(key, m.step) for key in client.get_run(run_id).data.metrics
            for m in client.get_metric_history(run_id, key)]
