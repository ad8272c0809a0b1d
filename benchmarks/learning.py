"""Does GRPO learn on the tiny profile? Eval success over RL steps, against a frozen control, per seed.

    python benchmarks/learning.py [--config config/tiny.yaml] [--benchmark alfworld] [--seeds 0 1 2]
                                  [--steps 16] [--eval-every 8] [--eval-tasks 32] [--jobs 2]

For every seed it trains two runs from the same warm start, with the profile's settings otherwise unchanged:
GRPO at the profile's lr, and a control at lr = 0. The control sees the same tasks in the same order and
samples from the same seeds, so what separates the two is the RL update, not task difficulty. Both are
evaluated on the first ``--eval-tasks`` tasks of the profile's eval split (32: twice the grid's panel, to halve
the noise) at steps 0, ``--eval-every``, ... ``--steps``. Runs go to
results/<profile>/learning/ (tracking off); finished runs are reused, so a second call only prints.
The warm start is built on first use (ALFWorld: ~5 min on one core).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.config import load_config  # noqa: E402

ARMS = {"grpo": None, "frozen (lr 0)": "0.0"}  # arm -> lr override (None: the profile's lr)


def run_arm(args, seed: int, arm: str, out: Path) -> Path:
    name = arm.split()[0]  # the arm's folder and log name
    overrides = [f"benchmark={args.benchmark}", "method=grpo", f"seed={seed}", f"train.steps={args.steps}",
                 f"eval.every={args.eval_every}", f"eval.panel_size={args.eval_tasks}", "tracking.enabled=false",
                 f"output_dir={out / name}"]
    if ARMS[arm] is not None:
        overrides.append(f"train.lr={ARMS[arm]}")
    cfg = load_config(args.config, overrides)
    log = out / f"{args.benchmark}-{name}-seed{seed}.log"
    with open(log, "w") as handle:
        done = subprocess.run([sys.executable, "-m", "harness", "train", "--config", args.config, "--resume",
                               *overrides], cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{arm} seed {seed} failed (exit {done.returncode}); see {log}")
    return cfg.run_dir


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="config/tiny.yaml")
    parser.add_argument("--benchmark", default="alfworld")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--eval-every", type=int, default=8)
    parser.add_argument("--eval-tasks", type=int, default=32)
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (one torch thread each)")
    args = parser.parse_args()
    profile = load_config(args.config, []).profile
    out = ROOT / "results" / profile / "learning"
    out.mkdir(parents=True, exist_ok=True)
    # one run first builds (or finds) the shared warm start; the others then start from its cache
    first = (args.seeds[0], "grpo")
    run_dirs = {first: run_arm(args, *first, out)}
    rest = [(seed, arm) for seed in args.seeds for arm in ARMS if (seed, arm) != first]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for key, run_dir in zip(rest, pool.map(lambda k: run_arm(args, *k, out), rest)):
            run_dirs[key] = run_dir
    frames = []
    for (seed, arm), run_dir in run_dirs.items():
        episodes = pd.read_csv(run_dir / "eval.csv")
        frames.append(episodes.assign(seed=seed, arm=arm))
    episodes = pd.concat(frames)
    table = episodes.pivot_table(index=["arm", "seed"], columns="step", values="success", aggfunc="mean")
    counts = episodes.groupby(["arm", "step"])["success"].agg(["sum", "count"])
    table.to_csv(out / f"{args.benchmark}_eval_success.csv")
    print(f"eval success ({args.benchmark}, {args.config}, {int(counts['count'].iloc[0] / len(args.seeds))} "
          f"eval tasks per seed and step), by arm and seed, at each eval step")
    print((100 * table).round(1).to_string())
    print("\nall seeds pooled (successes / episodes):")
    print(counts.astype(int).apply(lambda r: f"{r['sum']}/{r['count']}", axis=1).unstack("step").to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
