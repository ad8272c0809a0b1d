"""Env throughput of every registered benchmark: one env stepped serially vs ``VectorEnv`` with 4 workers.

    python -m perf.envs [--config config/tiny.yaml] [--benchmarks alfworld webshop] [--tasks 8] [--copies 2]
                              [--episode-steps 20] [--workers 4]

Both sides play the same episodes: each of ``--tasks`` train tasks ``--copies`` times, a seeded random policy
over the admissible actions, at most ``--episode-steps`` actions per episode. Timed: every reset and step
(games are built once beforehand, so one-time generation is not timed; worker start-up is not timed either;
every timed reset loads a game other than the env's previous one, as in a rollout).
Prints steps/s serial, steps/s vectorised, and their ratio.
"""
from __future__ import annotations

import argparse
import random
import time

from envs.base import BENCHMARKS, make_benchmark  # noqa: E402
from envs.vector import VectorEnv  # noqa: E402
from harness.config import load_config  # noqa: E402


def choose(rng: random.Random, observation) -> str:
    return rng.choice(observation.admissible_actions) if observation.admissible_actions else "look"


def serial_steps_per_s(benchmark, tasks, episode_steps: int, seed: int) -> tuple[float, int]:
    env, rng, steps = benchmark.make_env(), random.Random(seed), 0
    start = time.perf_counter()
    for task in tasks:
        obs = env.reset(task)
        for _ in range(episode_steps):
            result = env.step(choose(rng, obs))
            obs, steps = result.observation, steps + 1
            if result.done:
                break
    elapsed = time.perf_counter() - start
    env.close()
    return steps / elapsed, steps


def vector_steps_per_s(benchmark, tasks, episode_steps: int, seed: int, workers: int) -> tuple[float, int]:
    rng, steps = random.Random(seed), 0
    with VectorEnv(benchmark.make_env, num_workers=workers) as venv:
        venv.reset(tasks)  # warm-up: starts the workers and loads every game once
        start = time.perf_counter()
        # rotated, so that every env loads another game, as in a rollout (and as the serial env does)
        observations = venv.reset(tasks[1:] + tasks[:1])
        live = [o.info.get("failure_reason") is None for o in observations]
        for _ in range(episode_steps):
            actions = [choose(rng, o) if ok else None for o, ok in zip(observations, live)]
            if not any(a is not None for a in actions):
                break
            for i, result in enumerate(venv.step(actions)):
                if result is None:
                    continue
                steps += 1
                observations[i] = result.observation
                live[i] = not result.done
        elapsed = time.perf_counter() - start
    return steps / elapsed, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="config/tiny.yaml",
                        help="the profile whose benchmark sections size the games")
    parser.add_argument("--benchmarks", nargs="*", default=None, help="default: every registered benchmark")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--episode-steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    names = args.benchmarks or BENCHMARKS.available()
    print(f"config={args.config} tasks={args.tasks}x{args.copies} episode_steps<={args.episode_steps} "
          f"workers={args.workers}")
    print(f"{'benchmark':<10} {'serial steps/s':>15} {'vector steps/s':>15} {'ratio':>7}")
    for name in names:
        cfg = load_config(args.config, [f"benchmark={name}"])
        benchmark = make_benchmark(name, cfg.benchmark_config, seed=args.seed, think=cfg.rollout.think)
        tasks = list(benchmark.panel("train", args.tasks).tasks) * args.copies
        warm = benchmark.make_env()
        for task in tasks[: args.tasks]:  # build (generate, plan, translate) every game once, untimed
            warm.reset(task)
        warm.close()
        serial, n_serial = serial_steps_per_s(benchmark, tasks, args.episode_steps, args.seed)
        vector, n_vector = vector_steps_per_s(benchmark, tasks, args.episode_steps, args.seed, args.workers)
        print(f"{name:<10} {serial:>15.1f} {vector:>15.1f} {vector / serial:>7.2f}   "
              f"({n_serial} serial steps, {n_vector} vectorised steps)")


if __name__ == "__main__":
    main()
