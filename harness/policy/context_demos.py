"""Demonstrations under the teacher's privileged contexts, so a policy built here can read them.

A pretrained LLM follows a hint or a reference placed before its prompt; a model trained from scratch on plain
prompts has never seen such a prefix (issue: its teacher knew less than the student). The warm start therefore
also shows, on every turn where the plain demonstration leaves the choice open (a Gates gate under
``demo_pivots: leaning``) and on a share of the others (``model.warm_start_context_share``), each teacher context
(skills, successful sibling, hindsight) built by the very builders of the teacher pass (harness/teacher_contexts.py)
and placed before the prompt as that pass places it, with the action the context points to: the successful
reference's action at this turn (for the skill text: the demonstrator's, i.e. the expert's, action). For
hindsight, half of these turns show the observation another admissible action would have led to (the row's own
action in the teacher pass is often a wrong one), still with the reference's action as the target.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from envs.base import Benchmark, Task

# what the context demonstrations are: part of the tiny model's cache key (harness/policy/source.py), so a changed
# scheme rebuilds the warm start
SCHEME = ("every ambivalent turn and a share of the others, one context each in turn; hindsight: half with another "
          "action's outcome; target: the reference's action")


@dataclass
class DemoTurn:
    prompt: str
    observation: str
    admissible: list[str]
    action: str
    next_observation: str
    ambivalent: bool = False  # the plain demonstration teaches more than one response here (a Gates gate)


@dataclass
class Episode:
    task: Task
    turns: list[DemoTurn]
    won: bool


def play(benchmark: Benchmark, env, task: Task, rollout_cfg, max_steps: int, expert=None) -> Episode:
    """One episode of ``expert`` (the benchmark's demonstrator by default), prompts rendered as the rollout does."""
    obs = env.reset(task)
    expert = expert or benchmark.demonstrator(task)
    task_text = benchmark.task_description(task, obs)
    history: list[tuple[str, str]] = []
    turns: list[DemoTurn] = []
    won = False
    for step in range(max_steps):
        action = expert.act(obs)
        prompt = benchmark.format_prompt(task_text, history, obs, step, rollout_cfg.history_length)
        result = env.step(action)
        ambivalent = len(set(expert.targets(obs, action))) > 1
        turns.append(DemoTurn(prompt, obs.text, list(obs.admissible_actions), action, result.observation.text,
                              ambivalent))
        history.append((obs.text, action))
        obs = result.observation
        if result.done:
            won = bool(result.info.get("won"))
            break
    return Episode(task, turns, won)


def outcome(env, task: Task, actions: Sequence[str], action: str) -> tuple[str, bool]:
    """(observation, episode over and lost) after replaying ``actions`` on ``task`` and then taking ``action``."""
    env.reset(task)
    for past in actions:
        env.step(past)
    result = env.step(action)
    return result.observation.text, bool(result.done and not result.info.get("won"))


def context_for(kind: str, benchmark: Benchmark, reference: Episode, turn_index: int,
                next_observation: str | None = None) -> str:
    """The ``kind`` context the teacher pass would give a row at ``turn_index`` of a rollout of ``reference``'s
    task whose own action led to ``next_observation``, with ``reference`` as the group's successful sibling."""
    from harness.core.registry import TEACHER_CONTEXTS
    from harness.core.trajectory import Trajectory, Turn

    def as_turn(turn: DemoTurn, next_obs: str) -> Turn:
        return Turn(turn.prompt, [], [], [], "", turn.action, True, turn.observation, next_obs, 0.0)

    ref = Trajectory(reference.task, 0, 0, turns=[as_turn(t, t.next_observation) for t in reference.turns], won=True)
    own_turn = reference.turns[turn_index]
    own = Trajectory(reference.task, 0, 1, turns=[as_turn(own_turn, next_observation or own_turn.next_observation)])
    return TEACHER_CONTEXTS.get(kind)([ref, own], benchmark.name)[-1]


def context_demonstrations(benchmark: Benchmark, tasks, rollout_cfg, max_steps: int, share: float,
                           seed: int = 0) -> list[tuple[str, str]]:
    """(context + prompt, response) pairs on the demonstrator's turns of its won episodes: every turn where its
    plain demonstration teaches more than one response (the context is what decides there), and a ``share`` of
    the others; each chosen turn gets one context, the kinds in turn."""
    from harness.core.registry import TEACHER_CONTEXTS
    from harness.policy.warm_start import format_response

    if share <= 0:
        return []
    rng = random.Random(seed)
    kinds = TEACHER_CONTEXTS.available()
    env, scratch = benchmark.make_env(), benchmark.make_env()
    pairs: list[tuple[str, str]] = []
    try:
        for task in tasks:
            episode = play(benchmark, env, task, rollout_cfg, max_steps)
            if not episode.won:
                continue  # no successful reference to point to
            for index, turn in enumerate(episode.turns):
                if not turn.ambivalent and rng.random() >= share:
                    continue  # where the plain demonstration leaves the choice open, the context always decides
                kind = kinds[len(pairs) % len(kinds)]
                next_obs = None
                others = [a for a in turn.admissible if a != turn.action]
                if kind == "hindsight" and others and rng.random() < 0.5:
                    next_obs, _ = outcome(scratch, task, [t.action for t in episode.turns[:index]], rng.choice(others))
                context = context_for(kind, benchmark, episode, index, next_obs)
                pairs.append((context + turn.prompt, format_response(turn.action, rollout_cfg.think)))
    finally:
        env.close()
        scratch.close()
    return pairs


# ---------------------------------------------------------------------------------------------------------
# the probe: does the policy read the contexts? (perf/teacher_probe.py)
def pivots(scratch, episode: Episode) -> list[int]:
    """Turns of a won episode where some other admissible action ends the episode as a loss (a gate)."""
    out = []
    for index, turn in enumerate(episode.turns):
        past = [t.action for t in episode.turns[:index]]
        if any(outcome(scratch, episode.task, past, a)[1] for a in turn.admissible if a != turn.action):
            out.append(index)
    return out


def action_probabilities(model, tokenizer, prompt: str, actions: list[str], think: bool, limit: int) -> list[float]:
    """P(action | prompt) normalised over ``actions``: each response (the action in tags, then end of turn) scored
    whole, as the teacher pass scores a response."""
    import torch

    from harness.policy.logprobs import pad_left, pad_right, response_logprobs
    from harness.policy.tokenizer import chat_prompt_ids, end_of_turn_id
    from harness.policy.warm_start import format_response

    ids = chat_prompt_ids(tokenizer, [prompt])[0][-limit:]
    eot = end_of_turn_id(tokenizer)
    responses = [r + [eot] for r in tokenizer([format_response(a, think) for a in actions],
                                               add_special_tokens=False)["input_ids"]]
    prompt_ids, prompt_mask = pad_left([ids] * len(actions), tokenizer.pad_token_id)
    response_ids, response_mask = pad_right(responses, tokenizer.pad_token_id)
    device = next(model.parameters()).device
    with torch.no_grad():
        logp = response_logprobs(model, prompt_ids.to(device), prompt_mask.to(device), response_ids.to(device),
                                 response_mask.to(device), micro_batch=len(actions)).float().cpu()
    return torch.softmax((logp * response_mask).sum(1), dim=0).tolist()


def probe(model, tokenizer, benchmark: Benchmark, tasks, rollout_cfg, max_steps: int) -> dict[str, list[float]]:
    """P(the right action) at every pivot of the expert's episodes on ``tasks``: for the student (plain prompt)
    and for the teacher under each context, the expert's own episode as the successful sibling. Hindsight is
    scored once per admissible action as the row's own action (the observation it led to), and averaged."""
    from harness.core.registry import TEACHER_CONTEXTS

    env, scratch = benchmark.make_env(), benchmark.make_env()
    plain = rollout_cfg.max_prompt_tokens
    longer = plain + rollout_cfg.teacher_context_tokens
    out: dict[str, list[float]] = {"student": [], **{kind: [] for kind in TEACHER_CONTEXTS.available()}}
    try:
        for task in tasks:
            episode = play(benchmark, env, task, rollout_cfg, max_steps, expert=benchmark.expert(task))
            if not episode.won:
                continue
            for index in pivots(scratch, episode):
                turn = episode.turns[index]
                right = turn.admissible.index(turn.action)

                def p_right(prefix: str, limit: int) -> float:
                    return action_probabilities(model, tokenizer, prefix + turn.prompt, turn.admissible,
                                                rollout_cfg.think, limit)[right]

                out["student"].append(p_right("", plain))
                for kind in TEACHER_CONTEXTS.available():
                    if kind != "hindsight":
                        out[kind].append(p_right(context_for(kind, benchmark, episode, index), longer))
                        continue
                    past = [t.action for t in episode.turns[:index]]
                    seen = [outcome(scratch, task, past, a)[0] for a in turn.admissible]
                    out[kind].append(sum(p_right(context_for(kind, benchmark, episode, index, obs), longer)
                                         for obs in seen) / len(seen))
    finally:
        env.close()
        scratch.close()
    return out
