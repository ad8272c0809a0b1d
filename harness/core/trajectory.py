"""The records a rollout produces and everything above the ground layer passes around: a benchmark's
:class:`Task`, one :class:`Turn` of an episode and the :class:`Trajectory` of a whole episode. Plain data: the
rollout (harness/engine/rollout.py) fills them, the teacher contexts (harness/teacher_contexts.py) and the
warm start's demonstrations (harness/policy/context_demos.py) read them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Task:
    task_id: str
    task_type: str
    split: str
    # benchmark-specific payload (a game file path, a goal dict, ...); not part of the identity
    payload: Any = field(default=None, compare=False, hash=False, repr=False)



@dataclass
class Turn:
    prompt: str
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logp: list[float]
    response_text: str
    action: str
    action_valid: bool
    observation: str  # the observation this turn answered
    next_observation: str
    reward: float
    credit_label: str | None = None  # the benchmark's ground truth for this turn, if it gives one (docs/credit.md)


@dataclass
class Trajectory:
    task: Task
    group_id: int
    traj_id: int
    task_text: str = ""
    turns: list[Turn] = field(default_factory=list)
    won: bool = False
    score: float = 0.0
    truncated: bool = False
    failure_reason: str | None = None

    @property
    def episode_return(self) -> float:
        return sum(t.reward for t in self.turns)

    @property
    def actions(self) -> list[str]:
        return [t.action for t in self.turns]
