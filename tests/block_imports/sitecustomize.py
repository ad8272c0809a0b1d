"""Put this folder first on PYTHONPATH and list packages in $BLOCK_PACKAGES (comma-separated): importing any of
them then fails as if it were not installed, in this process and in every Python process it starts (torchrun's
ranks, ``python -m harness train``). The tests use it to stand in for a bare GPU machine without textworld, alfworld,
bm25s and rapidfuzz, without uninstalling them from the shared venv."""
import os
import sys

BLOCKED = {name for name in os.environ.get("BLOCK_PACKAGES", "").split(",") if name}


class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by tests/block_imports)", name=name)
        return None

    def find_module(self, name, path=None):  # importlib.util.find_spec goes through find_spec; kept for old callers
        return None


if BLOCKED:
    sys.meta_path.insert(0, _Blocker())
