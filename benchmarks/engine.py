"""Time split of an RL step on the tiny profile, GRPO vs SHARPO, measured in one run.

    python benchmarks/engine.py [--config config/tiny.yaml] [--benchmark alfworld] [--steps 3]

Prints, per method, the mean seconds per step of generation / env / prompt building / teacher / update, the
ratio of SHARPO's step time to GRPO's (target <= 1.3), and env + prompt-building time as a share of generation
time (target <= 10%). The first RL step is a warm-up and is left out of the means: it builds the env objects
(ALFWorld copies the Fast Downward library per env) and loads each game for the first time, one-off costs a
200-step run pays once. Runs go to a temporary folder with tracking off; the warm-started tiny model is reused
from results/models (built on first use).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.config import load_config  # noqa: E402
from harness.trainer import train  # noqa: E402

PARTS = ["generation_s", "env_s", "prompt_s", "teacher_s", "update_s", "step_s"]


def time_split(config: str, benchmark: str, method: str, steps: int, out: Path) -> pd.Series:
    cfg = load_config(config, [f"benchmark={benchmark}", f"method={method}", f"train.steps={steps + 1}",
                               "eval.every=0", "eval.panel_size=1", "tracking.enabled=false", f"output_dir={out}"])
    run_dir = train(cfg, force=True, log=lambda *_: None)
    frame = pd.read_csv(run_dir / "metrics.csv")
    steady = frame[frame["step"] > 0]  # step 0 is the warm-up (see the module docstring)
    return steady[[f"time/{p}" for p in PARTS]].mean().rename(lambda c: c.split("/")[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="config/tiny.yaml")
    parser.add_argument("--benchmark", default="alfworld")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        table = pd.DataFrame({m: time_split(args.config, args.benchmark, m, args.steps, Path(tmp))
                              for m in ("grpo", "sharpo")}).T
    print(f"seconds per RL step ({args.benchmark}, {args.config}, mean of steps 1-{args.steps}; step 0 is the warm-up)")
    print(table.round(3).to_string())
    ratio = table.loc["sharpo", "step_s"] / table.loc["grpo", "step_s"]
    overhead = (table["env_s"] + table["prompt_s"]) / table["generation_s"]
    print(f"\nSHARPO / GRPO step time: {ratio:.2f}  (target <= 1.3)")
    for method, share in overhead.items():
        print(f"{method}: env + prompt building = {100 * share:.1f}% of generation time  (target <= 10%)")


if __name__ == "__main__":
    main()
