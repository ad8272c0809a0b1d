"""The teacher's privileged contexts (methods/FORMULAS.md#teacher-contexts), registered in
``TEACHER_CONTEXTS``: each builds, from a step's trajectories, one context text per row (or None where the row has
none); the teacher pass (harness/engine/teacher.py) places it before the student's prompt. ``HEADERS`` holds every
context's fixed text, once: the tiny model's cache key reads it (harness/policy/source.py), so a changed or added
context rebuilds the warm start that was taught to read them.
"""
from __future__ import annotations

from typing import Sequence

from envs.base import BENCHMARKS
from harness.core.registry import TEACHER_CONTEXTS
from harness.core.trajectory import Trajectory

SKILLS_HEADER = "[Privileged Skill Information]\n"
SIBLING_HEADER = "Reference: a successful attempt at this task took these actions:\n"
HINDSIGHT_HEADER = "The observation that followed your action at this step:\n"


def _sibling_actions(trajs: Sequence[Trajectory]) -> dict[int, str | None]:
    """traj_id → the action text of a successful rollout of its group (another one where possible)."""
    winners: dict[int, list[Trajectory]] = {}
    for traj in trajs:
        if traj.won and traj.turns:
            winners.setdefault(traj.group_id, []).append(traj)
    chosen: dict[int, str | None] = {}
    for traj in trajs:
        pool = winners.get(traj.group_id, [])
        others = [w for w in pool if w.traj_id != traj.traj_id]
        ref = (others or pool or [None])[0]
        chosen[traj.traj_id] = "\n".join(ref.actions) if ref is not None else None
    return chosen


@TEACHER_CONTEXTS.register("skills")
def skills_contexts(trajs: Sequence[Trajectory], benchmark: str) -> list[str | None]:
    skill_for = BENCHMARKS.get(benchmark).skill_for
    return [f"{SKILLS_HEADER}{skill_for(traj.task.task_type)}\n\n" for traj in trajs for _ in traj.turns]


@TEACHER_CONTEXTS.register("successful_sibling")
def sibling_contexts(trajs: Sequence[Trajectory], benchmark: str) -> list[str | None]:
    actions = _sibling_actions(trajs)
    out: list[str | None] = []
    for traj in trajs:
        text = actions[traj.traj_id]
        out.extend([f"{SIBLING_HEADER}{text}\n\n" if text is not None else None] * len(traj.turns))
    return out


@TEACHER_CONTEXTS.register("hindsight")
def hindsight_contexts(trajs: Sequence[Trajectory], benchmark: str) -> list[str | None]:
    actions = _sibling_actions(trajs)
    out: list[str | None] = []
    for traj in trajs:
        text = actions[traj.traj_id]
        prefix = f"{SIBLING_HEADER}{text}\n\n" if text is not None else ""
        out.extend(f"{prefix}{HINDSIGHT_HEADER}{turn.next_observation}\n\n" for turn in traj.turns)
    return out


HEADERS = {"skills": SKILLS_HEADER, "successful_sibling": SIBLING_HEADER, "hindsight": HINDSIGHT_HEADER}
