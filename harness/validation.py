"""Checks that span a config and the plug-ins it names (the group size a method needs, the backend's name), and
reading the YAML file itself. A value's own range is checked where its config is built (harness/core/ranges.py).
"""
from __future__ import annotations

from pathlib import Path

import yaml

from harness.core.typed import ConfigError
from harness.policy.backends import BACKENDS


def check_config(cfg) -> None:
    """The group size the run's method needs, the backend, and the method's options (built, so checked)."""
    from harness.core import registry

    method_cls = registry.get(cfg.method.name)
    needed = getattr(method_cls, "min_group_size", 1)
    if cfg.rollout.group_size < needed:  # the field's own range (>= 1) allows what a method without groups needs
        raise ConfigError(
            f"rollout.group_size: {cfg.rollout.group_size} is out of range for method {cfg.method.name!r}, whose "
            f"advantages compare rollouts within a group; accepted: >= {needed}")
    if "credit_label" in method_cls.requires and not _labels_turns(cfg.benchmark):
        raise ConfigError(
            f"method {cfg.method.name!r} reads the benchmark's ground-truth turn labels (batch column credit_label), "
            f"and benchmark {cfg.benchmark!r} labels no turns; run it on a benchmark that does (gates: "
            f"Benchmark.labels_turns, docs/credit.md), or choose another method")
    if cfg.backend.name not in BACKENDS:
        raise ConfigError(f"backend.name: {cfg.backend.name!r} is not accepted; choose one of {BACKENDS.available()}")
    cfg.method.config  # the method's options, built and range-checked once (MethodSection.config)


def _labels_turns(benchmark: str) -> bool:
    """Whether the benchmark labels its turns: from its options class where that says so (a lazily registered
    engine, e.g. ALFWorld's, is not imported: on a machine without textworld the error names the labels), else
    from its ``Benchmark`` class."""
    from envs.base import BENCHMARKS, benchmark_config

    declared = getattr(benchmark_config(benchmark), "labels_turns", None)
    if declared is not None:
        return bool(declared)
    return bool(getattr(BENCHMARKS.get(benchmark), "labels_turns", False))


def read_yaml(path: Path) -> dict:
    """A YAML mapping from ``path``; a syntax error names the file, line and column, not a parser traceback."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        context = getattr(err, "context", None)
        raise ConfigError(f"{where}: YAML syntax error: {problem}" + (f" ({context})" if context else "")) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of keys (key: value lines), got a {type(data).__name__}")
    return data


def read_profile(path: Path, _seen: tuple[Path, ...] = ()) -> dict:
    """A profile's settings: its YAML mapping over that of the profile it names in ``extends:`` (a name in the same
    folder, or a path relative to it), recursively, so that a variant profile holds only what it changes. Nested
    mappings merge key by key; a list or a value replaces the parent's."""
    path = Path(path).resolve()
    if path in _seen:
        chain = " -> ".join(p.name for p in (*_seen, path))
        raise ConfigError(f"{path}: `extends:` makes a cycle ({chain}); a profile may extend another only once")
    raw = read_yaml(path)
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"{path}: `extends:` takes one profile name (e.g. `extends: cpu`), got {parent!r}")
    parent_path = path.parent / (parent if parent.endswith((".yaml", ".yml")) else f"{parent}.yaml")
    if not parent_path.exists():
        raise ConfigError(f"{path}: `extends: {parent}` names no profile ({parent_path} does not exist)")
    return merge_mappings(read_profile(parent_path, (*_seen, path)), raw)


def merge_mappings(base: dict, extra: dict) -> dict:
    """``base`` with ``extra`` laid over it: nested mappings merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in extra.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merge_mappings(out[key], value) if both else value
    return out
