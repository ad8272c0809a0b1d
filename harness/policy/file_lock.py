"""An exclusive lock on a file, held for a block: parallel workflow jobs then build a cached folder (the tiny
model, its warm start, a GGUF export) once, and the others wait and reuse it."""
from __future__ import annotations

import fcntl
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def file_lock(path: Path):
    """An exclusive flock on ``path`` for the block: parallel workflow jobs build a cached model folder once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
