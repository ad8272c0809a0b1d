"""The exact success probability of a policy on Gates: no sampling noise in the evaluation.

A sampled eval of 200 episodes at ~80% success has a binomial sd of 2.8 points, most of a seed's spread (issue 34).
Gates is small and its states are known, so P(win) can be computed instead: at every reachable state the policy
emits each admissible action's response with a probability the model gives exactly (``score``), everything else
is an invalid action (a loss), and a dynamic program over the states sums the winning paths.

The state is (position, turns used, whether the last turn hit a wall): the prompt (history_length 0) is a function
of it. The alarm need not be tracked: after a wrong door at a real gate no path wins (the alarm ends the run
later, or at the exit), so that branch adds 0. The step limit cuts a path off as a loss, as the rollout does.

``score(pairs)`` takes ``(prompt, action)`` pairs and returns the probability that the policy, sampled as in the
eval, answers the prompt with that action; the engine's scorer (harness/policy/sequence_prob.py) gives the
probability of the exact response the warm start teaches for it, a lower bound by the mass of other strings that
parse to the same action (measured in tests/test_gates_exact_model.py: none in 2,000 episodes).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence

from envs.base import Observation, Task
from envs.gates.env import describe, task_text
from envs.gates.tasks import DIRECTIONS, Gate, Layout

Score = Callable[[Sequence[tuple[str, str]]], Sequence[float]]
State = tuple[int, bool, int]  # (position, the last turn hit a wall, turns used)
Prompt = Callable[[str, Observation, int], str]  # (task text, observation, turns used) -> the policy's prompt


@dataclass(frozen=True)
class Corridor:
    """One task's game as the DP sees it: the layout, the env's settings and the rollout's step limit."""

    layout: Layout
    key_at_gates: bool
    max_steps: int


def observation(corridor: Corridor, position: int, wall: bool) -> Observation:
    """The env's observation at a cell; ``wall``: the last action was a wrong turn in this hall (GatesEnv.step)."""
    obs = describe(corridor.layout, position, corridor.key_at_gates)
    return Observation(f"a wall. {obs.text}", obs.admissible_actions) if wall else obs


def winnable(corridor: Corridor, position: int, steps: int) -> bool:
    """Whether the turns left can still carry the agent past the last cell (one turn a cell at best)."""
    return steps + len(corridor.layout.cells) - position <= corridor.max_steps


def reachable(corridor: Corridor) -> list[State]:
    """Every (position, wall, turns used) a winning path can pass through: the states whose prompts are scored."""
    states, frontier = set(), {(0, False, 0)}
    while frontier:
        states |= frontier
        nxt = set()
        for position, wall, steps in frontier:
            nxt.add((position + 1, False, steps + 1))
            if not isinstance(corridor.layout.cells[position], Gate):
                nxt.add((position, True, steps + 1))
        frontier = {s for s in nxt if s[0] < len(corridor.layout.cells) and winnable(corridor, s[0], s[2])} - states
    return sorted(states)


def win_probability(corridor: Corridor, prob: Callable[[State, str], float]) -> float:
    """P(win) from the start; ``prob(state, action)``: the policy's probability of the action at a reachable state."""
    layout, cells = corridor.layout, len(corridor.layout.cells)

    @lru_cache(maxsize=None)
    def value(position: int, wall: bool, steps: int) -> float:
        if position == cells:
            return 1.0  # only paths without a wrong real door get here
        if not winnable(corridor, position, steps):
            return 0.0  # the step limit comes first (truncated)
        state, cell = (position, wall, steps), layout.cells[position]
        advance = value(position + 1, False, steps + 1)
        if isinstance(cell, Gate):
            safe = cell.doors if cell.decoy else (layout.key,)
            return sum(prob(state, f"open {door}") for door in safe) * advance
        wrong = sum(prob(state, f"go {d}") for d in DIRECTIONS if d != cell.sign)
        return prob(state, f"go {cell.sign}") * advance + wrong * value(position, True, steps + 1)

    return value(0, False, 0)


def exact_success(tasks: Sequence[Task], score: Score, prompt: Prompt, key_at_gates: bool,
                  max_steps: int) -> list[float]:
    """P(win) of every task: the (prompt, action) pairs of all reachable states of all tasks scored in one
    ``score`` call (so the engine batches them as it likes), then each task's DP over those probabilities."""
    corridors = [Corridor(task.payload, key_at_gates, max_steps) for task in tasks]
    pairs: dict[tuple[str, str], int] = {}
    prompts: list[dict[State, str]] = []
    for corridor in corridors:
        text, of_state = task_text(corridor.layout), {}
        for state in reachable(corridor):
            obs = observation(corridor, state[0], state[1])
            of_state[state] = prompt(text, obs, state[2])
            for action in obs.admissible_actions:
                pairs.setdefault((of_state[state], action), len(pairs))
        prompts.append(of_state)
    scored = list(score(list(pairs)))
    if len(scored) != len(pairs):
        raise ValueError(f"exact_success: the scorer returned {len(scored)} probabilities for {len(pairs)} pairs; "
                         "it must return one per (prompt, action) pair, in order")
    return [win_probability(corridor, lambda state, action, of_state=of_state:
                            scored[pairs[of_state[state], action]])
            for corridor, of_state in zip(corridors, prompts)]
