"""Run identity: which protocol a run folder was made under, and how it differs from the config at hand.

A finished run stands for the protocol in its ``protocol.json`` only. The engine compares the full protocol hash
(config, method options, seeds, prompt template, task panels, package versions); the workflow and the tables
compare the *config identity*, what a profile decides for a run (``harness.records.protocol.config_hash``).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping

from harness.records.protocol import config_hash, protocol_hash, stable_view


def read_protocol(path: Path) -> dict | None:
    """The protocol record in ``path``, or None when it is missing or not a readable record."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("config"), dict) else None


def same_protocol(old: dict, new: dict) -> bool:
    """Both hashes are recomputed, so a record written by an older version of the hash still compares."""
    return protocol_hash(old) == protocol_hash(new)


def config_record(cfg) -> dict:
    """The part of a protocol record that the config alone decides (no benchmark is built)."""
    from harness.config import to_dict

    options = dataclasses.asdict(cfg.method.config)
    return {"config": to_dict(cfg), "method": {"name": cfg.method.name, "options": options}}


def config_identity(cfg) -> str:
    """The config identity of the run ``cfg`` describes: the Snakefile's per-run param, the tables' check."""
    return config_hash(json.loads(json.dumps(config_record(cfg), default=str)))


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, Mapping) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: data}


def _display_key(key: str) -> str:
    """``config.train.steps`` → ``train.steps`` (the name a user writes); other fields keep their place."""
    return key[len("config."):] if key.startswith("config.") else key


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def differences(old: dict, new: dict, limit: int = 12) -> list[str]:
    """``key: old → new`` for each field where two protocol records differ (their stable views), in key order."""
    a = _flatten(json.loads(json.dumps(stable_view(old), default=str)))
    b = _flatten(json.loads(json.dumps(stable_view(new), default=str)))
    lines: dict[str, str] = {}
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<absent>") != b.get(key, "<absent>"):
            name = _display_key(key)
            lines.setdefault(name, f"{name}: {_short(a.get(key, '<absent>'))} → {_short(b.get(key, '<absent>'))}")
    shown = list(lines.values())
    if len(shown) > limit:
        shown = shown[:limit] + [f"... and {len(shown) - limit} more"]
    return shown
