"""Multi-turn rollout: tasks × G envs stepped together, one batched generation per turn.

Each turn renders the benchmark's prompt (task, last-k history, observation, admissible actions) for every
live env, generates for all of them in one backend call, projects the outputs onto actions
(``envs.base.parse_action``) and steps the envs. An episode ends at ``done`` or at the step limit (recorded
as truncated). ``to_step_batch`` turns the trajectories into StepBatch rows, one per turn.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Sequence

import torch

from envs.base import CREDIT_LABELS, Benchmark, Observation, Task, parse_action
from harness.core.batch import SUCCESS_STATE, StepBatch
from harness.core.seeding import step_seed
from harness.core.trajectory import Trajectory, Turn
from harness.policy.logprobs import pad_left, pad_right


@dataclass
class RolloutTiming:
    generation_s: float = 0.0
    env_s: float = 0.0
    prompt_s: float = 0.0


def collect(backend, benchmark: Benchmark, envs, tasks: Sequence[Task], *, group_size: int, rollout_cfg,
            max_steps: int, temperature: float, seed: int, timing: RolloutTiming | None = None) -> list[Trajectory]:
    """Roll out ``group_size`` episodes of every task; group g holds the G rollouts of ``tasks[g]``.

    ``envs`` steps many games at once: ``reset(tasks) -> list[Observation]`` and
    ``step(actions) -> list[StepResult | None]`` (None where the action was None), see ``envs.vector``.
    """
    timing = timing or RolloutTiming()
    trajs = [Trajectory(task, g, g * group_size + k) for g, task in enumerate(tasks) for k in range(group_size)]
    start = time.perf_counter()
    observations: list[Observation | None] = list(envs.reset([t.task for t in trajs]))
    timing.env_s += time.perf_counter() - start
    for traj, obs in zip(trajs, observations):
        if obs is None or obs.info.get("failure_reason"):
            traj.failure_reason = (obs.info.get("failure_reason") if obs else None) or "reset failed"
        else:
            traj.task_text = benchmark.task_description(traj.task, obs)
    history: list[list[tuple[str, str]]] = [[] for _ in trajs]
    live = [i for i, t in enumerate(trajs) if t.failure_reason is None]

    for turn_idx in range(max_steps):
        if not live:
            break
        start = time.perf_counter()
        prompts = [benchmark.format_prompt(trajs[i].task_text, history[i], observations[i], turn_idx,
                                           rollout_cfg.history_length) for i in live]
        timing.prompt_s += time.perf_counter() - start
        start = time.perf_counter()
        generations = _generate(backend, prompts, rollout_cfg, temperature, step_seed(seed, turn_idx, "turn"))
        timing.generation_s += time.perf_counter() - start

        parsed = [parse_action(g.text, think=rollout_cfg.think,
                               admissible=(observations[i].admissible_actions
                                           if rollout_cfg.require_admissible else None))
                  for i, g in zip(live, generations)]
        actions: list[str | None] = [None] * len(trajs)
        for i, p in zip(live, parsed):
            actions[i] = p.action
        start = time.perf_counter()
        results = envs.step(actions)
        timing.env_s += time.perf_counter() - start

        still_live = []
        for i, prompt, gen, p in zip(live, prompts, generations, parsed):
            result, traj = results[i], trajs[i]
            if result is None or result.info.get("failure_reason"):
                traj.failure_reason = (result.info.get("failure_reason") if result else None) or "env step failed"
                continue
            valid = p.valid and bool(result.info.get("action_valid", True))
            traj.turns.append(Turn(prompt, gen.prompt_ids, gen.response_ids, gen.logprobs, gen.text, p.action, valid,
                                   observations[i].text, result.observation.text, float(result.reward),
                                   credit_label(result.info.get("credit_label"), valid)))
            history[i].append((observations[i].text, p.action))
            observations[i] = result.observation
            if result.done:
                traj.won = bool(result.info.get("won", False))
                traj.score = float(result.info.get("task_score", float(traj.won)))
            else:
                still_live.append(i)
        live = still_live
    for i in live:
        trajs[i].truncated = True
    return trajs


def credit_label(label: str | None, valid: bool) -> str | None:
    """The benchmark's label, or ``invalid`` where the rollout found the output invalid (e.g. a missing tag the
    env never saw): the invalid-action penalty already singles such a turn out, so the credit scores skip it."""
    if label is None:
        return None
    if label not in CREDIT_LABELS:
        raise ValueError(f"benchmark step info credit_label={label!r}; accepted: {list(CREDIT_LABELS)}")
    return label if valid else "invalid"


def _generate(backend, prompts: list[str], rollout_cfg, temperature: float, seed: int):
    out = []
    chunk = max(1, rollout_cfg.generation_batch)
    for start in range(0, len(prompts), chunk):
        out.extend(backend.generate(prompts[start:start + chunk], temperature=temperature, top_p=rollout_cfg.top_p,
                                    max_new_tokens=rollout_cfg.max_response_tokens,
                                    max_prompt_tokens=rollout_cfg.max_prompt_tokens,
                                    seed=step_seed(seed, start, "chunk")))
    return out


def observation_hash(text: str) -> int:
    """A stable 63-bit hash of an observation's text (GiGPO's anchor state key)."""
    return int.from_bytes(hashlib.sha1(text.encode()).digest()[:8], "little") & 0x7FFFFFFFFFFFFFFF


def next_state_hash(traj: Trajectory, k: int) -> int:
    """The state after turn k: the observation it led to, or SUCCESS_STATE after a won rollout's last turn (the goal
    node GraphGPO's rollout loop writes there, so every winning rollout ends in the same node)."""
    if traj.won and k == len(traj.turns) - 1:
        return SUCCESS_STATE
    return observation_hash(traj.turns[k].next_observation)


def to_step_batch(trajs: Sequence[Trajectory], pad_id: int) -> StepBatch:
    """One row per turn. Prompts are left-padded, responses right-padded (the log-prob scorer's layout)."""
    rows = [(traj, k, turn) for traj in trajs for k, turn in enumerate(traj.turns)]
    if not rows:
        raise ValueError("the rollout produced no turns (every env failed at reset); see the episodes' failure_reason")
    prompt_ids, prompt_mask = pad_left([turn.prompt_ids for _, _, turn in rows], pad_id)
    response_len = max(max(len(turn.response_ids) for _, _, turn in rows), 1)
    response_ids, response_mask = pad_right([turn.response_ids for _, _, turn in rows], pad_id, response_len)
    rollout_logp = torch.zeros(response_ids.shape)
    for r, (_, _, turn) in enumerate(rows):
        rollout_logp[r, :len(turn.rollout_logp)] = torch.tensor(turn.rollout_logp)
    return StepBatch(
        prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids, response_mask=response_mask,
        rollout_logp=rollout_logp,
        group_id=[traj.group_id for traj, _, _ in rows],
        traj_id=[traj.traj_id for traj, _, _ in rows],
        step_idx=[k for _, k, _ in rows],
        n_steps=[len(traj.turns) for traj, _, _ in rows],
        episode_return=[traj.episode_return for traj, _, _ in rows],
        success=[traj.won for traj, _, _ in rows],
        step_reward=[turn.reward for _, _, turn in rows],
        action_valid=[turn.action_valid for _, _, turn in rows],
        obs_hash=[observation_hash(turn.observation) for _, _, turn in rows],
        next_obs_hash=[next_state_hash(traj, k) for traj, k, _ in rows],
        task_id=[traj.task.task_id for traj, _, _ in rows],
        task_type=[traj.task.task_type for traj, _, _ in rows],
        # only where the benchmark labels its turns: a batch without the column gets no credit scores
        credit_label=[turn.credit_label for _, _, turn in rows] if any(turn.credit_label for _, _, turn in rows)
        else None,
    )
