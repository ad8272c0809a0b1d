"""The exact success probability of Gates (envs/gates/exact.py): the DP against a hand-computed case and against the
real env played by a stub policy (alarm, decoys, walls, the step limit), and, with the tiny model, against 2,000
sampled episodes of the engine's own rollout (tests/test_gates_exact_model.py)."""
from __future__ import annotations

import random
import re

import pytest

from envs.base import INVALID_ACTION_FEEDBACK
from envs.gates import GatesBenchmark, GatesConfig
from envs.gates.env import GatesEnv
from envs.gates.exact import Corridor, exact_success, reachable
from envs.gates.tasks import Gate, Hall, Layout

# the stub policy: in a hall the sign's way (RIGHT), the other way (WRONG), after a wall (WALL_RIGHT, WALL_WRONG);
# at a gate the key's door (KEY) and each other door (OTHER); the rest of the mass is an invalid action
RIGHT, WRONG, WALL_RIGHT, WALL_WRONG, KEY, OTHER = 0.7, 0.2, 0.5, 0.3, 0.6, 0.15  # doors: <= 3


def stub_probability(prompt: str, action: str) -> float:
    """The stub's probability of ``action``, read off the prompt as a policy would (sign, key, wall)."""
    now = re.search(r"now: (.*)\n", prompt).group(1)
    if action.startswith("go "):
        right = action == f"go {now.rsplit(' ', 1)[1].rstrip('.')}"
        wall = now.startswith("a wall.")
        return (WALL_RIGHT if right else WALL_WRONG) if wall else (RIGHT if right else WRONG)
    key = re.search(r"you hold the (\w+) key", prompt).group(1)
    return KEY if action == f"open {key}" else OTHER


def stub_score(calls: list):
    def score(pairs):
        calls.append(len(pairs))
        return [stub_probability(prompt, action) for prompt, action in pairs]
    return score


def benchmark(**gates) -> GatesBenchmark:
    return GatesBenchmark(GatesConfig(**{"train_panel_size": 4, "eval_panel_size": 30, **gates}), think=False)


def test_dp_matches_a_hand_computed_corridor():
    # hall, real gate, hall, decoy gate; slack 1: one wrong turn in all is affordable, two are not
    layout = Layout("red", (Hall("left"), Gate(("red", "blue")), Hall("right"), Gate(("blue", "red"), decoy=True)))
    task = type("T", (), {"payload": layout})()
    bench = benchmark(horizon=2, pivots=1, decoys=1, choices=2, slack=1)
    calls: list[int] = []
    prompt = lambda text, obs, steps: bench.format_prompt(text, [], obs, steps, 0)  # noqa: E731
    got = exact_success([task], stub_score(calls), prompt, key_at_gates=False, max_steps=5)
    halls = RIGHT * RIGHT + 2 * RIGHT * WRONG * WALL_RIGHT  # no wrong turn, or one (in either hall), then right
    assert got == [pytest.approx(KEY * (KEY + OTHER) * halls, abs=1e-12)]
    assert calls == [12]  # one call with the distinct pairs: 4 cells + 2 halls after a wall, 2 actions each
    no_slack = exact_success([task], stub_score([]), prompt, key_at_gates=False, max_steps=4)
    assert no_slack == [pytest.approx(KEY * (KEY + OTHER) * RIGHT * RIGHT, abs=1e-12)]


def test_reachable_states_stop_where_the_exit_is_out_of_reach():
    corridor = Corridor(Layout("red", (Hall("left"), Hall("left"), Gate(("red", "blue")))), False, 4)
    states = reachable(corridor)
    assert (0, False, 0) in states and (1, True, 2) in states
    assert all(steps + 3 - position <= 4 for position, _, steps in states)
    assert (1, True, 3) not in states  # the exit cannot be reached from there in the turns left


def play(bench: GatesBenchmark, env: GatesEnv, task, rng: random.Random) -> bool:
    """One episode of the stub policy in the real env, with the rollout's step limit."""
    obs = env.reset(task)
    text = bench.task_description(task, obs)
    for steps in range(bench.max_steps):
        prompt = bench.format_prompt(text, [], obs, steps, 0)
        weights = [stub_probability(prompt, a) for a in obs.admissible_actions]
        draw, action = rng.random(), "dance"  # past every admissible action's mass: an invalid output
        for candidate, weight in zip(obs.admissible_actions, weights):
            if draw < weight:
                action = candidate
                break
            draw -= weight
        result = env.step(action)
        assert not result.observation.text.startswith(INVALID_ACTION_FEEDBACK) or action == "dance"
        obs = result.observation
        if result.done:
            return bool(result.info["won"])
    return False


@pytest.mark.parametrize("alarm_delay", [0, 2])
def test_dp_matches_the_env_played_by_a_stub_policy(alarm_delay):
    bench = benchmark(horizon=3, pivots=2, decoys=1, choices=3, slack=2, alarm_delay=alarm_delay)
    tasks = list(bench.panel("eval_out", 6).tasks)
    exact = bench.exact_success(stub_score([]), tasks, history_length=0)
    rng, env, episodes = random.Random(0), bench.make_env(), 4000
    for task, p in zip(tasks, exact):
        wins = sum(play(bench, env, task, rng) for _ in range(episodes))
        se = max((p * (1 - p) / episodes) ** 0.5, 1e-3)
        assert abs(wins / episodes - p) < 4 * se, (task.task_id, wins / episodes, p)
    assert bench.exact_success(stub_score([]), tasks, history_length=1) is None  # the prompt holds the path
