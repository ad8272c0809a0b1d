"""``python -m paper_figures``: regenerate the tables and figures from the finished runs."""
from __future__ import annotations

import argparse
import sys

from paper_figures.build import build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_figures", description=__doc__)
    parser.add_argument("--runs", default="results/cpu/runs",
                        help="root of the run folders (default: results/cpu/runs)")
    parser.add_argument("--out", default="results/cpu", help="writes OUT/tables and OUT/figures (default: results/cpu)")
    parser.add_argument("--profile", default=None,
                        help="profile whose grid marks unfinished runs as missing (cpu, tiny, smoke, smol, paper, "
                             "paper_lora or a YAML path)")
    parser.add_argument("--config-dir", default="config", help="where profiles live (default: config)")
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap resamples of the intervals (default: 2000)")
    parser.add_argument("--seed", type=int, default=0, help="random state of the bootstrap (default: 0)")
    parser.add_argument("--baseline", default="grpo", help="method the probability of improvement compares to")
    parser.add_argument("--no-figures", action="store_true", help="write the tables only")
    parser.add_argument("--against", default=None, metavar="DIR",
                        help="instead of writing tables: compare the finished runs under --runs with a published grid "
                             "(e.g. docs/results/cpu) and print a verdict per method; exit 1 when one differs")
    args = parser.parse_args(argv)
    from harness.core.typed import ConfigError
    from paper_figures.load import RunDataError

    try:
        if args.against:
            return _against(args.runs, args.against)
        build(args.runs, args.out, args.profile, args.config_dir, args.reps, args.seed, args.baseline,
              figures=not args.no_figures)
    except (FileNotFoundError, RunDataError, ConfigError) as err:
        print(f"paper_figures: error: {err}", file=sys.stderr)
        return 2
    return 0


def _against(runs_dir: str, published: str) -> int:
    from paper_figures.against import against, failed
    from paper_figures.load import load_runs

    table, text = against(load_runs(runs_dir).runs, published)
    print(text)
    return 1 if failed(table) else 0


if __name__ == "__main__":
    sys.exit(main())
