"""verl-agent's WebShop prompt (``agent_system/environments/prompts/webshop.py``) as data, and its rendering.

``webshop_template(think=True)`` is verl-agent's template word for word. ``think=False`` (the tiny profile: a
~1M-parameter model cannot afford free-form reasoning) keeps everything but the closing instruction, which asks
for the action in ``<action>`` tags only. History lines are verl-agent's ``SimpleMemory.fetch`` format.
"""
from __future__ import annotations

from typing import Sequence

from envs.base import Observation, PromptTemplate

_HEADER = "\nYou are an expert autonomous agent operating in the WebShop e\u2011commerce environment"
_FIRST = _HEADER + """. 
Your task is to: {task_description}.
Your current observation is: {current_observation}.
Your admissible actions of the current situation are: 
[
{available_actions}
].

"""
_WITH_HISTORY = _HEADER + """.
Your task is to: {task_description}.
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} \
observations and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is: {current_observation}.
Your admissible actions of the current situation are:
[
{available_actions}
].

"""
_THINK_FIRST = """Now it's your turn to take one action for the current step.
You should first reason step-by-step about the current situation, then think carefully which admissible action \
best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it \
within <action> </action> tags.
"""
_NO_THINK = """Now it's your turn to take one action for the current step.
Choose the admissible action that best advances the shopping goal and present it within <action> </action> \
tags, with no other text.
"""
# verl-agent falls back to the no-history template when a prompt grows past this many characters
MAX_PROMPT_CHARS = 13000


def webshop_template(think: bool) -> PromptTemplate:
    if think:
        # verl-agent's with-history ending has no trailing space after "tags."; its first-turn ending has one
        think_history = _THINK_FIRST.replace("</think> tags. \n", "</think> tags.\n")
        return PromptTemplate("verl-agent/webshop", _FIRST + _THINK_FIRST, _WITH_HISTORY + think_history)
    return PromptTemplate("verl-agent/webshop-nothink", _FIRST + _NO_THINK, _WITH_HISTORY + _NO_THINK)


def format_history(history: Sequence[tuple[str, str]], history_length: int) -> tuple[str, int]:
    """The last ``history_length`` (observation, action) pairs as verl-agent's memory prints them."""
    recent = list(history[-history_length:]) if history_length > 0 else []
    start = len(history) - len(recent)
    lines = [f"[Observation {start + j + 1}: '{obs}', Action {start + j + 1}: '{action}']"
             for j, (obs, action) in enumerate(recent)]
    return "\n".join(lines), len(recent)


def render_prompt(template: PromptTemplate, task_text: str, history: Sequence[tuple[str, str]],
                  observation: Observation, step: int, history_length: int) -> str:
    actions = "\n".join(f"'{a}'," for a in observation.admissible_actions)
    first = template.first.format(task_description=task_text, current_observation=observation.text,
                                  available_actions=actions)
    if step == 0 or history_length <= 0 or not history:
        return first
    action_history, shown = format_history(history, history_length)
    prompt = template.with_history.format(
        task_description=task_text, step_count=step, history_length=shown, action_history=action_history,
        current_step=step + 1, current_observation=observation.text, available_actions=actions)
    return first if len(prompt) > MAX_PROMPT_CHARS else prompt
