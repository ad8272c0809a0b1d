"""Read finished run folders (``<runs>/<benchmark>/<method_label>/seed<seed>/``) into three data frames.

A run is finished when its ``done.json`` exists (the engine writes it last, atomically); folders without it are
runs in progress or killed, and are left out. Per run the engine writes ``metrics.csv`` (one row per training
step), ``eval.csv`` (one row per evaluated episode; the last eval step is the final evaluation) and
``done.json`` (run identity, wall time, final eval summary, and the step of the final evaluation: a run whose
``eval.csv`` lacks that step is refused, naming the run, rather than reported with an earlier evaluation).
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

RUN_KEYS = ["benchmark", "method", "seed"]
EVAL_COLUMNS = ["step", "task_id", "task_type", "success", "score", "return", "length"]


@dataclass
class Results:
    # one row per finished run: RUN_KEYS, steps, wall_time_s, success (exact where the benchmark gives it),
    # success_sampled (the final evaluation's episodes, where success is exact), score, run_dir
    runs: pd.DataFrame
    evals: pd.DataFrame  # every eval episode: RUN_KEYS + EVAL_COLUMNS + final (bool)
    metrics: pd.DataFrame  # every training step: RUN_KEYS + step + the engine's metric columns

    @property
    def final_episodes(self) -> pd.DataFrame:
        return self.evals[self.evals["final"].astype(bool)]

    @property
    def benchmarks(self) -> list[str]:
        return sorted(self.runs["benchmark"].unique())

    def empty(self) -> bool:
        return self.runs.empty

    def without(self, keys: set[tuple]) -> "Results":
        """These results less the runs whose (benchmark, method, seed) is in ``keys``."""
        def keep(frame: pd.DataFrame) -> pd.DataFrame:
            if frame.empty or not keys:
                return frame
            mask = [(b, m, int(s)) not in keys for b, m, s in zip(frame["benchmark"], frame["method"], frame["seed"])]
            return frame[mask].reset_index(drop=True)

        return Results(runs=keep(self.runs), evals=keep(self.evals), metrics=keep(self.metrics))


class RunDataError(ValueError):
    """A finished run's files contradict each other; the tables refuse it rather than report a wrong number."""


def _read_csv(path: Path) -> pd.DataFrame | None:
    if not path.exists():
        return None
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None


EXACT = "success_exact"  # the benchmark's exact success probability of a task (Gates), where it gives one


def success_column(evals: pd.DataFrame) -> str:
    """The eval column a run's success is read from: the exact success probability where every episode carries
    it (no sampling noise), else the sampled episodes' outcome."""
    return EXACT if EXACT in evals and evals[EXACT].notna().all() else "success"


def _run_row(done: dict, run_dir: Path, final: pd.DataFrame | None) -> dict:
    """Final success/score: the mean over the final evaluation's episodes, else done.json's summary. Where the
    benchmark computed the policy's exact success probability per task (Gates: ``success_exact``), that is the
    run's success, without the episodes' sampling noise; the sampled rate stays beside it (``success_sampled``,
    NaN where the success is the sampled rate itself)."""
    summary = done.get("final_eval") or {}
    have_episodes = final is not None and len(final)
    sampled = final["success"].mean() if have_episodes else summary.get("success")
    exact = final[EXACT].mean() if have_episodes and success_column(final) == EXACT else summary.get(EXACT)
    is_exact = exact is not None and not pd.isna(exact)
    success = exact if is_exact else sampled
    score = final["score"].mean() if final is not None and len(final) else summary.get("score")
    return {
        "benchmark": done["benchmark"],
        "method": done.get("method_label") or done["method"],
        "method_name": done.get("method", done.get("method_label")),
        "seed": int(done["seed"]),
        "steps": done.get("steps"),
        "wall_time_s": done.get("wall_time_s"),
        "success": float("nan") if success is None else float(success),
        "success_sampled": float(sampled) if is_exact and sampled is not None else float("nan"),
        "score": float("nan") if score is None else float(score),
        "run_dir": str(run_dir),
    }


def _tag(frame: pd.DataFrame, row: dict) -> pd.DataFrame:
    frame = frame.copy()
    for key in RUN_KEYS:
        frame.insert(RUN_KEYS.index(key), key, row[key])
    return frame


def _without_env_failures(evals: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Episodes an environment failure ended (after the engine's one retry) are neither won nor lost: they leave
    the outcome rates and are counted apart (``env_failures`` of the run, over its final evaluation)."""
    if "failure_reason" not in evals.columns:
        return evals, 0
    failed = evals["failure_reason"].fillna("").astype(str) != ""
    return evals[~failed].reset_index(drop=True), int((failed & evals["final"].astype(bool)).sum())


def read_run(run_dir: Path) -> tuple[dict, pd.DataFrame | None, pd.DataFrame | None]:
    """(run row, eval episodes with a ``final`` column, per-step metrics) of one finished run folder."""
    done = json.loads((run_dir / "done.json").read_text())
    missing = [k for k in ("benchmark", "seed") if k not in done] + (
        [] if "method_label" in done or "method" in done else ["method_label"])
    if missing:
        raise ValueError(f"{run_dir / 'done.json'} lacks {missing}; the engine writes them (harness train)")
    evals = _read_csv(run_dir / "eval.csv")
    final, env_failures = None, 0
    if evals is not None and len(evals):
        absent = sorted(set(EVAL_COLUMNS) - set(evals.columns))
        if absent:
            raise ValueError(f"{run_dir / 'eval.csv'} lacks columns {absent}; expected {EVAL_COLUMNS}")
        final_step = done.get("final_eval_step", done.get("steps"))
        if final_step is None:  # a done.json from before the step was recorded: the last evaluation
            final_step = evals["step"].max()
        evals["final"] = evals["step"] == final_step
        if not evals["final"].any():
            raise RunDataError(
                f"run {run_dir}: eval.csv has no rows for the final evaluation (step {final_step}, recorded in "
                f"done.json; it holds steps {sorted(evals['step'].unique().tolist())}). Re-evaluate the run "
                f"(python -m harness eval ... --out <csv>) or retrain it (python -m harness train ... --force)")
        evals, env_failures = _without_env_failures(evals)
        final = evals[evals["final"]]
    row = _run_row(done, run_dir, final)
    row["env_failures"] = env_failures
    metrics = _read_csv(run_dir / "metrics.csv")
    return row, (None if evals is None else _tag(evals, row)), (None if metrics is None else _tag(metrics, row))


def load_runs(root: str | Path) -> Results:
    """Every finished run under ``root``; an unreadable run is skipped with a warning naming its folder, a run whose
    files contradict each other is an error (``RunDataError``), and so is a ``root`` that does not exist."""
    if not Path(root).is_dir():
        raise FileNotFoundError(f"runs folder {root} does not exist; pass --runs <the output_dir of the profile's "
                                f"runs> (e.g. results/tiny/runs), or train the runs first (snakemake)")
    rows, evals, metrics = [], [], []
    for done_path in sorted(Path(root).glob("*/*/seed*/done.json")):
        try:
            row, run_evals, run_metrics = read_run(done_path.parent)
        except RunDataError:
            raise
        except (ValueError, KeyError, json.JSONDecodeError, pd.errors.ParserError) as err:
            warnings.warn(f"skipping run {done_path.parent}: {err}", stacklevel=2)
            continue
        rows.append(row)
        evals += [] if run_evals is None else [run_evals]
        metrics += [] if run_metrics is None else [run_metrics]
    runs = pd.DataFrame(rows, columns=[*RUN_KEYS, "method_name", "steps", "wall_time_s", "success", "success_sampled",
                                       "score",
                                       "env_failures", "run_dir"])
    return Results(
        runs=runs,
        evals=(pd.concat(evals, ignore_index=True) if evals
               else pd.DataFrame(columns=[*RUN_KEYS, *EVAL_COLUMNS, "final"])),
        metrics=pd.concat(metrics, ignore_index=True) if metrics else pd.DataFrame(columns=[*RUN_KEYS, "step"]),
    )
