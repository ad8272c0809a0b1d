"""Where the ground layer's registries find their plug-ins. ``METHODS`` and ``TEACHER_CONTEXTS`` live in
harness/core, which names no module above it (the import contract in pyproject.toml); this module, installed by
the harness package itself (harness/__init__.py) before any lookup can happen, tells them what to import the first
time a name is missing: every module of the ``methods`` package, and harness/teacher_contexts.py. Benchmarks
(envs.base.BENCHMARKS) and backends (harness.policy.backends.BACKENDS) discover their own packages.
"""
from __future__ import annotations

import importlib
import pkgutil

from harness.core.registry import METHODS, TEACHER_CONTEXTS


def _import_methods(name: str | None) -> None:
    """Import every module of the ``methods`` package (once): their ``@register`` decorators run."""
    import methods

    for info in pkgutil.iter_modules(methods.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"methods.{info.name}")


def _import_teacher_contexts(name: str | None) -> None:
    importlib.import_module("harness.teacher_contexts")  # its @TEACHER_CONTEXTS.register decorators run


def install() -> None:
    METHODS.discover_with(_import_methods)
    TEACHER_CONTEXTS.discover_with(_import_teacher_contexts)
