"""Does every registered method learn on a profile? Final eval success against a frozen control, paired by seed.

    python -m perf.learning [--config config/cpu.yaml] [--benchmark gates] [--seeds 0 1 2 3 4]
                                  [--methods grpo sharpo ...] [--steps N] [--jobs 2] [key=value ...]

For every seed it trains every method of ``harness.core.registry`` (or ``--methods``) from the profile's shared warm
start, plus one control at lr = 0 (label ``frozen``), which sees the same tasks in the same order and samples from
the same seeds: what separates a method from the control is its RL update. The profile's eval panel and schedule
are used unless overridden (``key=value`` overrides go to every run, e.g. ``gates.horizon=12``). Runs go to
results/<profile>/learning/<tag>/runs (tracking off; ``--tag`` names a sweep point); finished runs are reused, so
a second call only prints. It prints each method's final success and its gain over the control with the 95%
interval over seeds, and writes both tables under the same folder.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from harness.config import load_config  # noqa: E402
from harness.core import registry  # noqa: E402
from harness.grid.runs import FROZEN, FROZEN_METHOD, frozen_overrides  # noqa: E402


def run_one(args, seed: int, method: str, runs: Path) -> None:
    name = FROZEN_METHOD if method == FROZEN else method
    overrides = [f"benchmark={args.benchmark}", f"method={name}", f"seed={seed}", "tracking.enabled=false",
                 f"output_dir={runs}", *args.overrides]
    if args.steps is not None:
        overrides.append(f"train.steps={args.steps}")
    if method == FROZEN:
        overrides += frozen_overrides()
    load_config(args.config, overrides)  # a bad override fails here, before any run starts
    log = runs.parent / "logs" / f"{method}-seed{seed}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as handle:
        done = subprocess.run([sys.executable, "-m", "harness", "train", "--config", args.config, "--resume",
                               *overrides], cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{method} seed {seed} failed (exit {done.returncode}); see {log}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="config/cpu.yaml")
    parser.add_argument("--benchmark", default=None, help="default: the profile's benchmark")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--methods", nargs="+", default=None, help="default: every registered method")
    parser.add_argument("--steps", type=int, default=None, help="default: the profile's train.steps")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (one torch thread each)")
    parser.add_argument("--tag", default="default", help="sub-folder of this sweep point")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    args = parser.parse_args()
    profile_cfg = load_config(args.config, args.overrides)
    args.benchmark = args.benchmark or profile_cfg.benchmark
    methods = (args.methods or registry.available()) + [FROZEN]
    out = ROOT / "results" / profile_cfg.profile / "learning" / args.tag
    runs = out / "runs"
    # one run first builds (or finds) the shared warm start; the others then start from its cache
    jobs = [(seed, method) for seed in args.seeds for method in methods]
    run_one(args, *jobs[0], runs)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(lambda job: run_one(args, *job, runs), jobs[1:]))

    from paper_figures import control, tables
    from paper_figures.load import load_runs

    results = load_runs(runs)
    ctx = tables.Context(expected=results.runs[["benchmark", "method", "seed"]], reference=tables.load_reference(),
                         order=methods)
    main_tidy, main_display = tables.main_table(results, ctx)
    gain_tidy, gain_display = control.control_table(results, ctx)
    main_tidy.to_csv(out / "success.csv", index=False)
    gain_tidy.to_csv(out / "gain_over_frozen.csv", index=False)
    print(f"{args.benchmark}, {args.config} {' '.join(args.overrides)}: final eval success, mean ± 95% CI over "
          f"{len(args.seeds)} seeds")
    print(main_display[[c for c in main_display.columns if "paper" not in c]].to_markdown(index=False))
    print("\ngain over the frozen control, paired by seed:")
    print(gain_display.to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
