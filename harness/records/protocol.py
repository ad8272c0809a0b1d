"""The frozen protocol record of a run: what a reader needs to know the run is comparable to another.

``protocol.json`` holds the resolved config, the prompt-template hash, the task-panel hashes, package
versions, the git commit, the method's full option set (its variant flags) and the seeds, plus a sha256 over
everything else so two runs can be checked for the same protocol at a glance.
"""
from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "transformers", "accelerate", "tokenizers", "alfworld", "textworld", "mlflow", "vllm",
            "bm25s", "rapidfuzz", "credit-assignment-bench")


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def machine() -> dict[str, Any]:
    """Where the run computed: the instruction set torch's CPU kernels dispatch to (AVX2 and AVX-512 runs of one
    config end at other weights, docs/reproduce.md), the processor and the GPU. Recorded, never hashed: a run
    resumed on another node of a cluster keeps its protocol."""
    import torch

    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "processor": _processor_name(),
            "machine": platform.machine(), "cuda_device": torch.cuda.get_device_name(0)
            if torch.cuda.is_available() else None, "torch_threads": torch.get_num_threads()}


def _processor_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit(cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def build_protocol(*, config: dict, method_options: dict, seeds: dict, template_sha256: str,
                   panels: dict[str, Any]) -> dict:
    """``panels`` maps a role ("train", "eval") to a TaskPanel."""
    record = {
        "config": config,
        "method": {"name": config["method"]["name"], "options": method_options},
        "seeds": seeds,
        "template_sha256": template_sha256,
        "panels": {role: {"split": p.split, "size": len(p), "sha256": p.sha256} for role, p in panels.items()},
        "versions": package_versions(),
        "git_commit": git_commit(Path(__file__).resolve().parents[2]),
        "machine": machine(),
    }
    record["sha256"] = protocol_hash(record)
    record["config_sha256"] = config_hash(record)
    return record


# Where a run is written and logged, and which runs the workflow expands, are not how one run is made; nor is the
# name of the profile that asked for it: a profile that extends another (cpu_more extends cpu) shares its runs folder
# so that its methods pair with the same GRPO, oracle and frozen runs, which it must neither redo nor call stale.
VOLATILE_CONFIG_KEYS = ("output_dir", "run_name", "tracking", "grid", "profile")
# How long a rank may wait for the others decides whether a hung run fails, never what a run computes; where a
# sleeping engine keeps its weights (CPU memory or nowhere) changes nothing either: every sync rewrites them all;
# the memory plan's reserve decides whether a run starts, not what it computes
VOLATILE_SECTION_KEYS = (("train", "process_group_timeout_min"), ("backend", "sleep_level"),
                         ("train", "memory_reserve_gib"))


def stable_view(record: dict) -> dict:
    """The record without volatile fields (its own hashes, run paths, tracking, the grid, the git commit, the
    machine)."""
    stable = {k: v for k, v in record.items() if k not in ("sha256", "config_sha256", "git_commit", "machine")}
    config = {k: v for k, v in (stable.get("config") or {}).items() if k not in VOLATILE_CONFIG_KEYS}
    for section, key in VOLATILE_SECTION_KEYS:
        if isinstance(config.get(section), dict) and key in config[section]:
            config[section] = {k: v for k, v in config[section].items() if k != key}
    stable["config"] = config
    return stable


def protocol_hash(record: dict) -> str:
    """sha256 over the stable view of the record (config, method options, seeds, template, panels, versions)."""
    return _sha256(stable_view(record))


def config_hash(record: dict) -> str:
    """sha256 over what a profile decides for one run: its resolved config and its method's full option set.
    The workflow re-runs a run when this changes; package versions or panel contents do not enter it."""
    stable = stable_view(record)
    return _sha256({"config": stable["config"], "method": stable.get("method")})


def _sha256(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def write_json(path: Path, data: dict) -> None:
    """Atomic write: a crash never leaves half a file that a later resume would trust."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    tmp.replace(path)
