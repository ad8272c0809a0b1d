"""Frozen task panels: which games make each split, in a fixed order that never depends on the file system.

Generated: game k of a panel has task type ``types[k % 6]`` (so any prefix of the panel covers all six
types) and a scene and seed drawn from ``(panel_seed, split, type, k)``; eval-in games never repeat a train
game. Official: each type's games sorted by the sha256 of their id, then interleaved type by type.
"""
from __future__ import annotations

import functools
import hashlib
import random
from itertools import zip_longest
from pathlib import Path

import alfworld.gen.constants as C

from envs.alfworld.config import AlfworldSettings
from envs.alfworld.gamegen import GameSize, GameSpec, NoTaskInScene, sample_spec, scene_supports
from envs.alfworld.games import GameStore, task_id_for
from envs.alfworld.official import list_split
from envs.alfworld.scenes import room_type, split_scenes
from envs.base import Task

_MAX_DRAWS = 50  # redraws of one panel slot before giving up on finding a new game


def game_size(settings: AlfworldSettings) -> GameSize:
    return GameSize(settings.max_receptacles, settings.num_distractors, settings.max_instances)


@functools.lru_cache(maxsize=None)
def candidate_scenes(split: str, task_type: str, scenes: tuple[int, ...] | None) -> tuple[int, ...]:
    pool = split_scenes(split) if scenes is None else tuple(s for s in scenes if s in split_scenes(split))
    return tuple(s for s in pool
                 if room_type(s) in C.GOALS_VALID[task_type] and scene_supports(s, task_type))


def generated_tasks(settings: AlfworldSettings, split: str, n: int,
                    exclude: frozenset[str] = frozenset()) -> list[Task]:
    size, tasks, seen = game_size(settings), [], set(exclude)
    for k in range(n):
        task_type = settings.task_types[k % len(settings.task_types)]
        scenes = candidate_scenes(split, task_type, settings.scenes)
        if not scenes:
            raise ValueError(f"alfworld: no scene for {task_type} in split {split} "
                             f"(alfworld.scenes={list(settings.scenes) if settings.scenes else 'all'}); "
                             f"add scenes of room types {sorted(C.GOALS_VALID[task_type])}")
        rng = random.Random(f"alfworld-panel|{settings.panel_seed}|{split}|{task_type}|{k}")
        for _ in range(_MAX_DRAWS):
            try:
                spec = sample_spec(rng.choice(scenes), task_type, rng.randrange(2**31), size)
            except NoTaskInScene:
                continue
            task_id = task_id_for(spec, split)
            if task_id not in seen:
                break
        else:
            raise ValueError(f"alfworld: cannot draw {n} distinct {split} games with this game size and scene set; "
                             f"ask for a smaller panel or larger games")
        seen.add(task_id)
        tasks.append(Task(task_id, task_type, split, payload=spec))
    return tasks


def official_tasks(root: Path, split: str, task_types: tuple[str, ...]) -> list[Task]:
    by_type: dict[str, list[tuple[str, Path]]] = {t: [] for t in task_types}
    for task_id, task_type, game in list_split(root, split):
        if task_type in by_type:
            by_type[task_type].append((task_id, game))
    for games in by_type.values():
        games.sort(key=lambda g: hashlib.sha256(g[0].encode()).hexdigest())
    order = [g for row in zip_longest(*by_type.values()) for g in row if g is not None]
    tt = {task_id: t for t, games in by_type.items() for task_id, _ in games}
    return [Task(task_id, tt[task_id], split, payload=str(game)) for task_id, game in order]


class GameResolver:
    """Task -> game file; generated games are written (once) to the cache. Picklable, for env workers."""

    def __init__(self, games_root: str, translation_cache_dir: str | None):
        self.store = GameStore(games_root, translation_cache_dir)

    def __call__(self, task: Task) -> Path:
        if isinstance(task.payload, GameSpec):
            return self.store.ensure(task.payload, task.task_id)
        if task.payload is None:
            raise ValueError(f"task {task.task_id!r} carries no game; build tasks with AlfworldBenchmark.panel()")
        return Path(task.payload)
