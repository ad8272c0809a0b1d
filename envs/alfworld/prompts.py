"""verl-agent's ALFWorld prompt (``agent_system/environments/prompts/alfworld.py``) as data.

``think=True`` is verl-agent's text verbatim (typo "observaitons" included: it is part of the published
prompt). ``think=False`` (the tiny profile) replaces the reasoning instruction with an actions-only one; pair it
with ``parse_action(..., think=False)``.
"""
from __future__ import annotations

from typing import Sequence

from envs.base import Observation, PromptTemplate

_HEAD_FIRST = """
You are an expert agent operating in the ALFRED Embodied Environment.
Your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].
"""
_HEAD_HISTORY = """
You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: {task_description}
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observaitons and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].
"""
_TAIL_THINK = """
Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""
_TAIL_ACTION_ONLY = """
Now it's your turn to take an action.
Choose an admissible action for current step and present it within <action> </action> tags.
"""


def alfworld_template(think: bool) -> PromptTemplate:
    tail = _TAIL_THINK if think else _TAIL_ACTION_ONLY
    name = "verl-agent/alfworld" + ("" if think else "/action-only")
    return PromptTemplate(name=name, first=_HEAD_FIRST + tail, with_history=_HEAD_HISTORY + tail)


def format_admissible(actions: Sequence[str]) -> str:
    return "\n ".join(f"'{a}'" for a in actions if a != "help")


def format_history(history: Sequence[tuple[str, str]], history_length: int) -> tuple[str, int]:
    """verl-agent's memory text: the last ``history_length`` (observation, action) pairs, numbered from 1."""
    recent = list(history)[-history_length:] if history_length > 0 else []
    start = len(history) - len(recent)
    lines = [f"[Observation {start + j + 1}: '{obs}', Action {start + j + 1}: '{act}']"
             for j, (obs, act) in enumerate(recent)]
    return "\n".join(lines), len(recent)


def render(template: PromptTemplate, task_text: str, history: Sequence[tuple[str, str]], observation: Observation,
           step: int, history_length: int) -> str:
    admissible = format_admissible(observation.admissible_actions)
    if step == 0 or history_length <= 0:
        return template.first.format(current_observation=observation.text, admissible_actions=admissible)
    action_history, shown = format_history(history, history_length)
    return template.with_history.format(task_description=task_text, step_count=len(history), history_length=shown,
                                        action_history=action_history, current_step=len(history) + 1,
                                        current_observation=observation.text, admissible_actions=admissible)


def extract_task(first_observation_text: str) -> str:
    """The text after "Your task is to: " in the first observation, as verl-agent extracts it."""
    marker = "Your task is to: "
    start = first_observation_text.find(marker)
    if start == -1:
        raise ValueError(f"no {marker!r} in the first observation: {first_observation_text[:200]!r}")
    return first_observation_text[start + len(marker):].strip()
