"""Measure the token basis the compute-matched arm is planned from (harness/grid/compute_match.py), from runs that
logged ``train/tokens``, ``train/rows`` and ``cost/teacher_tokens`` (harness/engine/trainer.py, teacher.py):

    python -m paper_figures.compute_basis --runs results/cpu/runs --out config/compute_basis/cpu.json

Student tokens a row: the logged steps' tokens over their rows, over every run. Teacher tokens a row, per teacher
context: the tokens the teacher pass read over the rows of the batch (rows without a context read none), over the
runs of the methods that use that context. A profile names the file in ``grid.compute_basis``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pandas as pd

from paper_figures.load import load_runs

NEEDED = ("train/tokens", "train/rows")


def measure(runs_dir: str | Path) -> dict:
    """The basis of the runs under ``runs_dir`` (every finished run; the frozen control's rows count too)."""
    from harness.core import registry

    results = load_runs(runs_dir)
    metrics = results.metrics
    missing = [c for c in NEEDED if c not in metrics.columns]
    if results.runs.empty or missing:
        raise SystemExit(f"{runs_dir}: no finished run logs {missing or list(NEEDED)}; train runs first")
    names = results.runs.set_index(["benchmark", "method", "seed"])["method_name"]
    keys = list(zip(metrics["benchmark"], metrics["method"], metrics["seed"]))
    context = pd.Series([registry.get(names[key]).teacher for key in keys], index=metrics.index)
    rows = metrics["train/rows"].astype(float)
    teacher: dict[str, float] = {}
    if "cost/teacher_tokens" in metrics.columns:
        for name in sorted(c for c in context.dropna().unique()):
            picked = (context == name) & metrics["cost/teacher_tokens"].notna()
            if picked.any():
                teacher[name] = float(metrics.loc[picked, "cost/teacher_tokens"].sum() / rows[picked].sum())
    return {"student_tokens_per_row": float(metrics["train/tokens"].sum() / rows.sum()),
            "teacher_tokens_per_row": teacher,
            "measured_on": {"runs": int(len(results.runs)), "steps": int(len(metrics)),
                            "methods": sorted(results.runs["method"].unique().tolist()),
                            "commit": _commit()}}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", required=True, help="a runs folder (a profile's output_dir)")
    parser.add_argument("--out", required=True, help="the JSON to write (a profile's grid.compute_basis)")
    args = parser.parse_args(argv)
    basis = measure(args.runs)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(basis, indent=2) + "\n")
    print(json.dumps(basis, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
