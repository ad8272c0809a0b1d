"""``python -m envs.gates [key=value ...]``: a sample task, the win rates of the expert, the warm start's format
expert and a uniformly random admissible policy on the eval_out panel (e.g. ``horizon=12 pivots=3``), and, in the
random policy's lost episodes, how often the fatal turn is the last one (docs/credit.md: a score that position
alone can earn)."""
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


def play(benchmark: Benchmark, make_policy, split: str = "eval_out") -> list[tuple[bool, list[str]]]:
    """(won, the turns' credit labels) of one episode per task of ``split``."""
    env, episodes = benchmark.make_env(), []
    for task in benchmark.panel(split).tasks:
        obs, policy, labels = env.reset(task), make_policy(task), []
        for _ in range(benchmark.max_steps):
            result = env.step(policy.act(obs))
            obs = result.observation
            labels.append(result.info.get("credit_label"))
            if result.done:
                break
        episodes.append((bool(result.info.get("won")), labels))
    return episodes


def win_rate(benchmark: Benchmark, make_policy, split: str = "eval_out") -> float:
    episodes = play(benchmark, make_policy, split)
    return sum(won for won, _ in episodes) / len(episodes)


def fatal_last_share(episodes: list[tuple[bool, list[str]]]) -> tuple[float, int]:
    """(share of the lost episodes with a fatal turn whose fatal turn is the last turn, how many such episodes)."""
    lost = [labels for won, labels in episodes if not won and "fatal" in labels]
    return (sum(labels[-1] == "fatal" for labels in lost) / len(lost) if lost else float("nan")), len(lost)


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
    share, lost = fatal_last_share(play(bench, lambda t: RandomPolicy(t.task_id)))
    print(f"random play: the fatal turn is the last turn in {share:.1%} of {lost} lost episodes with a fatal turn")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
