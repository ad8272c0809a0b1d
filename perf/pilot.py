"""The calibration pilot's table (docs/profiles.md): at every evaluated step of every setting, GRPO's success and
each oracle's paired gain over it, with the 95% half-width of that gain over seeds.

    snakemake --cores 2 --config profile=pilot      # GRPO and the two oracles × 3 seeds × config/pilot.yaml's settings
    python -m perf.pilot results/pilot/runs

The criterion the default task must meet (issue: a positive control that wins): at the default number of steps,
oracle_fatal's paired gain over GRPO is at least twice its paired 95% half-width, and GRPO is below 85%. A run's
success at a step is the mean over its eval tasks of the exact success probability where the benchmark gives it
(``success_exact``), else of the sampled episodes.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from paper_figures.load import load_runs, success_column
from paper_figures.stats import paired_t

BASELINE, ORACLES = "grpo", ("oracle_fatal", "oracle_decisive")


def step_success(root: Path) -> pd.DataFrame:
    """One row per (method, setting, seed, step): the run's eval success at that step."""
    evals = load_runs(root).evals
    column = success_column(evals)
    frame = evals.assign(setting=[label.partition("@")[2] or "default" for label in evals["method"]],
                         method=[label.partition("@")[0] for label in evals["method"]])
    return frame.groupby(["method", "setting", "seed", "step"], as_index=False)[column].mean().rename(
        columns={column: "success"})


def pilot_table(success: pd.DataFrame) -> pd.DataFrame:
    lines = []
    for (setting, step), cell in success.groupby(["setting", "step"]):
        by_seed = cell.pivot_table(index="seed", columns="method", values="success")
        if BASELINE not in by_seed:
            continue
        line = {"setting": setting, "step": step, "seeds": int(by_seed[BASELINE].notna().sum()),
                "GRPO %": round(100 * by_seed[BASELINE].mean(), 1)}
        for oracle in ORACLES:
            if oracle in by_seed:
                gain = paired_t((by_seed[oracle] - by_seed[BASELINE]).dropna())
                line[f"{oracle} − GRPO"] = f"{100 * gain['mean']:+.1f} ± {100 * gain['half95']:.1f}"
                line[f"{oracle}: gain ≥ 2 × half-width"] = bool(0 < 2 * gain["half95"] <= gain["mean"])
        lines.append(line)
    return pd.DataFrame(lines)


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else "results/pilot/runs")
    if not root.is_dir():
        print(f"no runs under {root}: run `snakemake --cores 2 --config profile=pilot` first", file=sys.stderr)
        return 2
    print(pilot_table(step_success(root)).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
