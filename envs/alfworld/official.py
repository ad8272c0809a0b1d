"""The official ALFWorld games (``json_2.1.1``): finding them, checking them, listing a split's games.

Games are selected as ``AlfredTWEnv.collect_game_files`` does (a ``traj_data.json`` of one of the six task
types, a ``game.tw-pddl`` marked solvable, no movable/sliced variants), but listed in sorted order rather than
the file system's, and the error for a missing or partial tree says what was expected and how to get it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from envs.alfworld.gamegen import TASK_TYPES
from envs.alfworld.games import GAME_FILE, SPLIT_DIRS, TRAJ_FILE

DATA_ENV_VAR = "ALFWORLD_DATA"
HOW_TO_GET = (
    "Get the official games with `alfworld-download` (needs internet; it fills $ALFWORLD_DATA, default "
    "~/.cache/alfworld) and point the benchmark at them with ALFWORLD_DATA=<dir> or `alfworld.data_path: <dir>`; "
    "or run offline on generated games with `alfworld.source: generated`."
)


class AlfworldDataError(FileNotFoundError):
    pass


def configured_data_path(data_path: str | None) -> Path | None:
    """Where official data is configured: ``data_path`` if set (used as given, checked strictly), else
    $ALFWORLD_DATA when it holds a ``json_2.1.1`` tree, else None (= generated games).

    ``alfworld`` sets ALFWORLD_DATA to ~/.cache/alfworld (and creates it) when imported, so the variable alone
    does not mean that data was downloaded.
    """
    if data_path:
        return Path(os.path.expandvars(os.path.expanduser(data_path)))
    raw = os.environ.get(DATA_ENV_VAR)
    if not raw:
        return None
    path = Path(os.path.expandvars(os.path.expanduser(raw)))
    looks_official = (path / "json_2.1.1").is_dir() or any((path / d).is_dir() for d in SPLIT_DIRS.values())
    return path if looks_official else None


def json_root(path: Path) -> Path:
    """Accept the ALFWORLD_DATA folder (holding ``json_2.1.1``) or the ``json_2.1.1`` folder itself."""
    if not path.is_dir():
        raise AlfworldDataError(f"ALFWorld data folder {path} does not exist. Expected "
                                f"{path}/json_2.1.1/{{train,valid_seen,valid_unseen}}/. {HOW_TO_GET}")
    return path / "json_2.1.1" if (path / "json_2.1.1").is_dir() else path


def _game_entry(trial: Path) -> tuple[str, Path] | None:
    """(task type, game file) of a usable trial folder, else None."""
    traj, game = trial / TRAJ_FILE, trial / GAME_FILE
    if "movable" in str(trial) or "Sliced" in str(trial) or not traj.is_file() or not game.is_file():
        return None
    task_type = json.loads(traj.read_text()).get("task_type")
    if task_type not in TASK_TYPES:
        return None
    if not json.loads(game.read_text()).get("solvable"):
        return None
    return task_type, game


def list_split(root: Path, split: str) -> list[tuple[str, str, Path]]:
    """Sorted (task id, task type, game file) of ``split``; the task id is the trial path under ``root``."""
    folder = root / SPLIT_DIRS[split]
    trials = sorted(p.parent for p in folder.glob(f"*/*/{TRAJ_FILE}"))
    games = []
    for trial in trials:
        entry = _game_entry(trial)
        if entry is not None:
            games.append((trial.relative_to(root).as_posix(), entry[0], entry[1]))
    return games


def check_tree(path: Path) -> Path:
    """The ``json_2.1.1`` root of ``path``; raises naming every missing or empty split."""
    root = json_root(path)
    problems = []
    for split, name in SPLIT_DIRS.items():
        folder = root / name
        if not folder.is_dir():
            problems.append(f"missing folder {folder} (split {split})")
        elif not any(folder.glob(f"*/*/{GAME_FILE}")):
            problems.append(f"{folder} holds no <task>/<trial>/{GAME_FILE} (split {split}); "
                            f"run `alfworld-generate` on it if it only has traj_data.json + initial_state.pddl")
    if problems:
        raise AlfworldDataError(
            f"ALFWorld data at {path} is incomplete: " + "; ".join(problems) + ". Expected the json_2.1.1 "
            f"layout <root>/{{train,valid_seen,valid_unseen}}/<task>/<trial>/{{{TRAJ_FILE},{GAME_FILE}}}. "
            + HOW_TO_GET)
    return root
