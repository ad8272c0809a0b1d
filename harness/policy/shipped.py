"""Warm starts shipped with the repository, so that a grid starts from the same weights on every machine.

A tiny model's warm start is trained from scratch, and floating-point sums run in another order on another CPU
instruction set (AVX2 against AVX-512): the same command ends at other weights, and the default task's step-0
success moved from 65% to 75.5% between two machines (docs/reproduce.md). As a pretrained checkpoint is on GPUs,
the starting policy is therefore an artifact: ``config/warm_starts/<folder>/`` holds the cache folder that
``harness.policy.source.tiny_model_dir`` names for a profile, with ``MANIFEST.json`` (the sha256 of every file,
the command that built it) and a README with its step-0 success. A run whose cache folder is missing copies the
shipped one after checking its hashes, and a profile may also name a shipped folder as its ``model.source`` (a
policy warm-started on one task and trained by RL on another, as a pretrained checkpoint is), checked the same
way. The command in a folder's manifest (``python -m harness build-model ... --rebuild``) trains it again and says
whether the rebuilt weights match the shipped ones; ``--ship`` replaces the shipped copy.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from harness.policy.gguf import file_sha256  # one hashing helper for every model file

SHIPPED_ROOT = Path(__file__).resolve().parents[2] / "config" / "warm_starts"
MANIFEST = "MANIFEST.json"
WEIGHTS = "model.safetensors"


class ShippedModelError(RuntimeError):
    """A shipped warm start whose files do not match its manifest."""


def shipped_folder(model_dir: Path) -> Path | None:
    """The shipped copy of the cache folder ``model_dir`` (same folder name), or None."""
    folder = SHIPPED_ROOT / Path(model_dir).name
    return folder if (folder / MANIFEST).exists() else None


def folder_hashes(folder: Path) -> dict[str, str]:
    return {p.name: file_sha256(p) for p in sorted(Path(folder).iterdir())
            if p.is_file() and p.name not in (MANIFEST, "README.md")}


def verify(folder: Path, log=print) -> dict[str, str] | None:
    """Check a shipped folder's files against its manifest (None: the folder has no manifest); the hashes found."""
    folder = Path(folder)
    if not (folder / MANIFEST).exists():
        return None
    manifest = json.loads((folder / MANIFEST).read_text())
    found = folder_hashes(folder)
    if found != manifest["sha256"]:
        changed = sorted({name for name, _ in set(found.items()) ^ set(manifest["sha256"].items())})
        raise ShippedModelError(
            f"{folder}: files differ from {MANIFEST} ({changed}); restore them with `git checkout -- {folder}`, or "
            f"rebuild with the command in {folder / MANIFEST}")
    log(f"warm start: the shipped weights {folder.name} (sha256 {found[WEIGHTS][:16]}), checked against its manifest")
    return found


def install_shipped(model_dir: Path, log=print) -> bool:
    """Copy the shipped warm start into ``model_dir`` (the cache) after checking every file's sha256; False when
    none is shipped for it."""
    source = shipped_folder(model_dir)
    if source is None:
        return False
    found = verify(source, log)
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    for name in found:
        shutil.copy2(source / name, model_dir / name)
    log(f"warm start: copied into {model_dir}, not rebuilt")
    return True


def compare_rebuilt(model_dir: Path, log=print) -> bool | None:
    """After a rebuild: whether its weights equal the shipped ones (None when none is shipped), said in the log."""
    source = shipped_folder(model_dir)
    if source is None:
        return None
    shipped = json.loads((source / MANIFEST).read_text())["sha256"][WEIGHTS]
    rebuilt = file_sha256(Path(model_dir) / WEIGHTS)
    if rebuilt == shipped:
        log(f"rebuilt warm start: sha256 {rebuilt[:16]}, identical to the shipped one")
        return True
    log(f"rebuilt warm start: sha256 {rebuilt[:16]} differs from the shipped {shipped[:16]} ({source}). Expected on "
        f"another CPU instruction set or library version (docs/reproduce.md); runs load the cache folder {model_dir}, "
        f"so delete it to go back to the shipped weights, or pass --ship to replace them")
    return False


def ship(model_dir: Path, command: str, log=print) -> Path:
    """Copy the cache folder ``model_dir`` into config/warm_starts/ with its manifest."""
    target = SHIPPED_ROOT / Path(model_dir).name
    target.mkdir(parents=True, exist_ok=True)
    hashes = folder_hashes(model_dir)
    for name in hashes:
        shutil.copy2(Path(model_dir) / name, target / name)
    (target / MANIFEST).write_text(json.dumps({"command": command, "sha256": hashes}, indent=2) + "\n")
    log(f"shipped {model_dir} as {target} (weights sha256 {hashes[WEIGHTS][:16]})")
    return target
