"""paper_figures: honest exit codes, the final evaluation from done.json, and runs whose protocol is not the
profile's marked stale instead of reported as finished (issue 18)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from workflow_fixtures.synthetic_runs import write_run

from paper_figures.build import build

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "workflow_fixtures"


def run_figures(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "paper_figures", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def test_missing_runs_folder_exits_non_zero(tmp_path):
    done = run_figures("--runs", str(tmp_path / "no_such_runs"), "--out", str(tmp_path / "out"), "--no-figures")
    assert done.returncode != 0
    assert "no_such_runs" in done.stderr and not (tmp_path / "out" / "tables" / "main.csv").exists()


def test_eval_csv_without_the_final_step_is_refused_naming_the_run(tmp_path):
    runs = tmp_path / "runs"
    run_dir = write_run(runs, "alfworld", "grpo", 0, 0.5)
    evals = pd.read_csv(run_dir / "eval.csv")
    evals[evals["step"] == 0].to_csv(run_dir / "eval.csv", index=False)  # cut down to its step-0 rows
    with pytest.raises(Exception) as err:
        build(runs, tmp_path / "out", figures=False, reps=20)
    assert str(run_dir) in str(err.value) and "step 4" in str(err.value)
    done = run_figures("--runs", str(runs), "--out", str(tmp_path / "out2"), "--no-figures", "--reps", "20")
    assert done.returncode != 0 and str(run_dir) in done.stderr


def profile_with_steps(path: Path, steps: int) -> Path:
    text = (FIXTURES / "grid4.yaml").read_text() + f"train:\n  steps: {steps}\n"
    path.write_text(text)
    return path


def write_engine_like_run(runs: Path, profile: Path, method: str, seed: int, outcomes_success: int = 6) -> Path:
    """A synthetic finished run whose protocol.json holds the resolved config of ``profile``, as the engine's does."""
    import dataclasses

    import numpy as np

    from harness.config import load_config, to_dict
    from harness.core import registry

    run_dir = write_run(runs, "alfworld", method, seed, 0.5,
                        outcomes=np.array([1] * outcomes_success + [0] * (12 - outcomes_success)))
    cfg = load_config(profile, ["benchmark=alfworld", f"method={method}", f"seed={seed}"])
    options = dataclasses.asdict(registry.build(cfg.method.name, cfg.method.options).config)
    record = {"config": to_dict(cfg), "method": {"name": method, "options": options}}
    (run_dir / "protocol.json").write_text(json.dumps(record, default=str))
    return run_dir


def test_runs_made_under_another_profile_are_marked_not_reported(tmp_path):
    old, new = profile_with_steps(tmp_path / "old.yaml", 4), profile_with_steps(tmp_path / "new.yaml", 8)
    runs = tmp_path / "runs"
    for method in ("grpo", "sharpo"):
        for seed in (0, 1):
            write_engine_like_run(runs, old, method, seed)
    out = tmp_path / "out"
    build(runs, out, profile=str(old), figures=False, reps=20)
    assert pd.read_csv(out / "tables" / "missing_runs.csv").empty

    with pytest.warns(UserWarning, match="train.steps"):
        build(runs, out, profile=str(new), figures=False, reps=20)
    stale = pd.read_csv(out / "tables" / "stale_runs.csv")
    assert len(stale) == 4 and stale["differs"].str.contains("train.steps").all()
    assert len(pd.read_csv(out / "tables" / "missing_runs.csv")) == 4  # the profile's runs are not made yet
    main = (out / "tables" / "main.md").read_text()
    assert "50.0" not in main and "—" in main


def test_a_profile_that_only_renames_shares_the_runs_instead_of_calling_them_stale(tmp_path):
    """cpu_more extends cpu and shares its runs folder: the GRPO, oracle and frozen runs the default grid made pair
    with its methods' runs; the name of the profile that asked for a run is not how the run was made."""
    first = profile_with_steps(tmp_path / "first.yaml", 4)
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(first.read_text().replace("profile: grid4", "profile: grid4_more"))
    runs = tmp_path / "runs"
    for seed in (0, 1):
        write_engine_like_run(runs, first, "grpo", seed)
    out = tmp_path / "out"
    build(runs, out, profile=str(renamed), figures=False, reps=20)
    assert pd.read_csv(out / "tables" / "stale_runs.csv").empty
    assert "50.0" in (out / "tables" / "main.md").read_text()
