"""``python -m envs.gates [key=value ...]``: a sample task, and the win rates of the expert, the warm start's
format expert and a uniformly random admissible policy on the eval_out panel (e.g. ``horizon=12 pivots=3``)."""
from __future__ import annotations

import random
import sys

import yaml

from envs.base import Benchmark, Expert, Observation
from envs.gates.benchmark import GatesBenchmark
from envs.gates.config import GatesConfig


class SampledTargets(Expert):
    """Plays as the warm start would if it learnt its demonstrations exactly: a uniform pick of the targets."""

    def __init__(self, expert: Expert, seed: str):
        self.expert, self.rng = expert, random.Random(seed)

    def act(self, observation: Observation) -> str:
        return self.rng.choice(self.expert.targets(observation, self.expert.act(observation)))


class RandomPolicy(Expert):
    def __init__(self, seed: str):
        self.rng = random.Random(seed)

    def act(self, observation: Observation) -> str:
        return self.rng.choice(observation.admissible_actions)


def win_rate(benchmark: Benchmark, make_policy, split: str = "eval_out") -> float:
    env, wins = benchmark.make_env(), 0
    tasks = benchmark.panel(split).tasks
    for task in tasks:
        obs, policy = env.reset(task), make_policy(task)
        for _ in range(benchmark.max_steps):
            result = env.step(policy.act(obs))
            obs = result.observation
            if result.done:
                wins += bool(result.info["won"])
                break
    return wins / len(tasks)


def main(argv: list[str]) -> int:
    options = {k: yaml.safe_load(v) for k, _, v in (a.partition("=") for a in argv)}
    bench = GatesBenchmark(GatesConfig(**options))
    task = bench.panel("eval_out").tasks[0]
    obs = bench.make_env().reset(task)
    print(bench.format_prompt(bench.task_description(task, obs), [], obs, 0, 0))
    print(f"\nexpert {win_rate(bench, bench.expert):.3f}  "
          f"format expert {win_rate(bench, lambda t: SampledTargets(bench.demonstrator(t), t.task_id)):.3f}  "
          f"random {win_rate(bench, lambda t: RandomPolicy(t.task_id)):.3f}  "
          f"(eval_out, {len(bench.panel('eval_out'))} tasks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
