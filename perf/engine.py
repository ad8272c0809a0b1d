"""Time split of an RL step on the tiny profile, GRPO vs SHARPO, measured in one run.

    python -m perf.engine [--config config/tiny.yaml] [--benchmark alfworld] [--seeds 0 1 2 3] [--steps 4]

Prints, per method, the mean seconds of generation / env / prompt building / teacher / update per RL step, the
ratio of SHARPO's step time to GRPO's (target <= 1.3), and env + prompt-building time as a share of generation
time (target <= 10%). Each number is measured where it means what it says:

- The ratio is paired: each seed's first RL step, once per method. With the same seed and starting policy both
  methods collect exactly the same rollouts, so the ratio is what the method adds (teacher pass, advantages,
  loss), not how long its episodes happened to run (later steps drift apart with the policies).
- The env share is the steady state: steps 1.. of a ``--steps`` run of each method. Step 0 builds the env
  objects (ALFWorld copies the Fast Downward library per env): a one-off cost.

Untimed first: one run that loads the model, then one reset of every train-panel game, which fills the game
caches as a long run's first steps do (ALFWorld: a game's first load in a process unpickles its parsed logic,
~20 ms; a 200-step run sees each of its 120 train games ~25 times). Without it the method timed first pays
those loads for both, and the comparison is biased. Runs go to a temporary folder with tracking off; the
warm-started tiny model is reused from results/models (built on first use).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pandas as pd

from harness.config import (
    load_config,  # noqa: E402
    seeded_benchmark,  # noqa: E402
)
from harness.engine.trainer import train  # noqa: E402

PARTS = ["generation_s", "env_s", "prompt_s", "teacher_s", "update_s", "step_s"]


def step_times(config: str, benchmark: str, method: str, seed: int, steps: int, out: Path) -> pd.DataFrame:
    cfg = load_config(config, [f"benchmark={benchmark}", f"method={method}", f"seed={seed}", f"train.steps={steps}",
                               "eval.every=0", "eval.panel_size=1", "tracking.enabled=false", f"output_dir={out}"])
    run_dir = train(cfg, force=True, log=lambda *_: None)
    frame = pd.read_csv(run_dir / "metrics.csv")
    return frame[[f"time/{p}" for p in PARTS]].rename(columns=lambda c: c.split("/")[1])


def load_every_train_game(config: str, benchmark_name: str) -> int:
    benchmark = seeded_benchmark(load_config(config, [f"benchmark={benchmark_name}"]))
    env, tasks = benchmark.make_env(), benchmark.panel("train").tasks
    for task in tasks:
        env.reset(task)
    env.close()
    return len(tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="config/tiny.yaml")
    parser.add_argument("--benchmark", default="alfworld")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3], help="paired first steps")
    parser.add_argument("--steps", type=int, default=4, help="steps of the steady-state runs (step 0 left out)")
    args = parser.parse_args()
    methods = ("grpo", "sharpo")
    with tempfile.TemporaryDirectory() as tmp:
        step_times(args.config, args.benchmark, "grpo", 10_000, 1, Path(tmp))  # warm-up, not timed
        games = load_every_train_game(args.config, args.benchmark)
        paired = {m: pd.concat([step_times(args.config, args.benchmark, m, seed, 1, Path(tmp)) for seed in args.seeds])
                  for m in methods}
        steady = {m: step_times(args.config, args.benchmark, m, args.seeds[0], args.steps, Path(tmp)).iloc[1:]
                  for m in methods}
    for title, runs in ((f"paired: the first step of seeds {args.seeds}, identical rollouts for both methods", paired),
                        (f"steady state: steps 1-{args.steps - 1} of a {args.steps}-step run, seed {args.seeds[0]}",
                         steady)):
        print(f"\nseconds per RL step ({args.benchmark}, {args.config}, {games} train games loaded first); {title}")
        print(pd.DataFrame({m: runs[m].mean() for m in methods}).T.round(3).to_string())
    ratio = paired["sharpo"]["step_s"].mean() / paired["grpo"]["step_s"].mean()
    print(f"\nSHARPO / GRPO step time (paired): {ratio:.2f}  (target <= 1.3)")
    for method in methods:
        share = (steady[method]["env_s"] + steady[method]["prompt_s"]).sum() / steady[method]["generation_s"].sum()
        print(f"{method}: env + prompt building = {100 * share:.1f}% of generation time, steady state  (target <= 10%)")


if __name__ == "__main__":
    main()
