"""The Gates prompt: the task, the current cell and its actions, in as few tokens as a rule allows (~40), since
every prompt token is paid for by every rollout turn on a CPU. ``history_length`` > 0 adds the last k
(observation, action) pairs; the observation alone already tells the policy where it is.
"""
from __future__ import annotations

from typing import Sequence

from envs.base import Observation, PromptTemplate

_BODY = "task: {task_description}\n{action_history}now: {current_observation}\nactions: {available_actions}\n"
_NO_THINK = "reply with <action>one action</action>."
_THINK = "reason in <think> </think>, then reply with <action>one action</action>."


def gates_template(think: bool) -> PromptTemplate:
    ending = _THINK if think else _NO_THINK
    return PromptTemplate("gates-think" if think else "gates", _BODY + ending, _BODY + ending)


def render_prompt(template: PromptTemplate, task_text: str, history: Sequence[tuple[str, str]],
                  observation: Observation, step: int, history_length: int) -> str:
    recent = list(history[-history_length:]) if history_length > 0 else []
    lines = "".join(f"before: {obs} -> {action}\n" for obs, action in recent)
    return template.render(len(recent), task_description=task_text, action_history=lines,
                           current_observation=observation.text,
                           available_actions=" | ".join(observation.admissible_actions))
