"""Generated games on disk, laid out like the official ``json_2.1.1`` tree, keyed by the game's hash.

``<root>/<split dir>/<task type>-<Obj>-None-<Recep>-<scene>/trial_G<hash16>/{game.tw-pddl,traj_data.json}``
with split dirs ``train``, ``valid_seen`` (eval-in) and ``valid_unseen`` (eval-out). The hash covers the
PDDL problem and the task text, so a folder's name says exactly what is in it and a cached folder is reused by
every process. A game is written to a temporary folder and renamed into place, so concurrent workers never see
half a game.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from pathlib import Path

import alfworld

from envs.alfworld.engine import make_textworld_env, visible_commands
from envs.alfworld.gamegen import GameSpec, traj_data, write_problem

SPLIT_DIRS = {"train": "train", "eval_in": "valid_seen", "eval_out": "valid_unseen"}
GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
_DATA = Path(alfworld.__file__).resolve().parent / "data"


class GenerationError(RuntimeError):
    pass


@functools.lru_cache(maxsize=1)
def game_logic_text() -> tuple[str, str]:
    """(PDDL domain, grammar with the "UNKNOWN GOAL" placeholder) as shipped by ``alfworld``."""
    return (_DATA / "alfred.pddl").read_text(), (_DATA / "alfred.twl2").read_text()


def task_id_for(spec: GameSpec, split: str) -> str:
    return f"{SPLIT_DIRS[split]}/{spec.folder_name()}/trial_G{spec.game_hash[:16]}"


def dumps(obj) -> str:
    """Canonical JSON: the same game gives the same bytes."""
    return json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=True) + "\n"


def game_data(spec: GameSpec, walkthrough: list[str] | None) -> dict:
    domain, grammar = game_logic_text()
    return {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", spec.task_desc),
            "pddl_problem": write_problem(spec), "solvable": walkthrough is not None, "walkthrough": walkthrough}


def plan_walkthrough(spec: GameSpec, translation_cache_dir: str | None = None) -> list[str]:
    """Fast Downward's plan for the game, replayed on the engine to check that it wins."""
    env = make_textworld_env(plan=True, translation_cache_dir=translation_cache_dir)
    env.load(game_data(spec, None))
    state = env.reset()
    plan = list(state["policy_commands"] or [])
    if not plan:
        raise GenerationError(f"the planner found no plan for {spec.folder_name()} ({spec.task_desc!r})")
    env = make_textworld_env(plan=False, translation_cache_dir=translation_cache_dir)
    env.load(game_data(spec, None))
    state = env.reset()
    for command in plan:
        if command not in visible_commands(state):
            raise GenerationError(f"plan step {command!r} is not admissible in {spec.folder_name()}")
        state, _, _ = env.step(command)
    if not state["won"]:
        raise GenerationError(f"the plan for {spec.folder_name()} does not win: {plan}")
    return plan


class GameStore:
    """Writes (once) and finds generated games under ``root``."""

    def __init__(self, root: str | os.PathLike, translation_cache_dir: str | None = None):
        self.root = Path(root)
        self.translation_cache_dir = translation_cache_dir

    def folder(self, task_id: str) -> Path:
        return self.root / task_id

    def ensure(self, spec: GameSpec, task_id: str) -> Path:
        """The game file of ``spec``, generating and planning it if it is not on disk yet."""
        folder = self.folder(task_id)
        game_file = folder / GAME_FILE
        if game_file.is_file() and (folder / TRAJ_FILE).is_file():
            return game_file
        walkthrough = plan_walkthrough(spec, self.translation_cache_dir)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
        try:
            (tmp / GAME_FILE).write_text(dumps(game_data(spec, walkthrough)))
            (tmp / TRAJ_FILE).write_text(dumps(traj_data(spec, task_id)))
            try:
                os.rename(tmp, folder)
            except OSError:
                if not game_file.is_file():  # not a lost race with another writer: a real error
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return game_file
