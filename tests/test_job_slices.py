"""Job slices (harness/job_slices.py, the Snakefile's train rule): a run longer than a partition lets one job run
is a chain of jobs; each asks for the slice, ends with SLURM's SIGTERM (the run saves and exits 75) and the next
resumes it. Shown with Snakemake itself: the job's resolved runtime, and a run that needs three slices finishing
only when the slices are declared."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.typed import ConfigError
from harness.job_slices import JobSlices, job_slices
from tests.test_slurm_submit import resolved_train_resources

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "workflow_fixtures"
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]


def test_a_run_longer_than_a_slice_is_that_many_jobs_plus_the_failure_retries():
    lora = job_slices(REPO / "config" / "paper_lora.yaml")  # ~150 h on partitions of 48 h
    assert (lora.slice_min, lora.count, lora.retries(3)) == (2880, 4, 6)
    assert job_slices(REPO / "config" / "paper.yaml").count == 1  # 48 h fits one slice
    assert job_slices(REPO / "config" / "paper_lora.yaml", "1440").count == 7  # --config slice_min=1440
    assert JobSlices(100, 100).retries(0) == 0 and JobSlices(100, 30).count == 4
    assert job_slices(REPO / "config" / "cpu.yaml") == JobSlices(20, 20)  # no slice_min: one job of runtime_min
    with pytest.raises(ConfigError, match="slice_min='2d'.*whole minutes.*sinfo"):
        job_slices(REPO / "config" / "paper_lora.yaml", "2d")


def test_the_slurm_job_asks_for_the_slice_not_the_whole_run():
    resources = resolved_train_resources("--config", "profile=paper_lora")
    assert resources["runtime"] == 2880  # was 9000: more than most partitions allow
    resources = resolved_train_resources("--config", "profile=paper_lora", "slice_min=1440")
    assert resources["runtime"] == 1440


def _chain(tmp_path: Path, profile: str, slices_needed: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "FAKE_TRAIN_LOG": str(tmp_path / "invocations.log"), "FAKE_TRAIN_SLICES": str(slices_needed)}
    return subprocess.run([*SNAKEMAKE, "runs", "--cores", "1", "--directory", str(tmp_path), "--config",
                           f"profile={profile}", f"config_dir={FIXTURES}",
                           f"train_cmd={sys.executable} {FIXTURES / 'fake_train.py'}"],
                          env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.slow  # ~20 s: two snakemake start-ups
def test_a_run_cut_into_three_slices_finishes_through_the_retries(tmp_path: Path):
    done = _chain(tmp_path / "sliced", "sliced", slices_needed=3)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "sliced" / "runs" / "alfworld" / "grpo" / "seed0" / "done.json").exists()
    assert (tmp_path / "sliced" / "invocations.log").read_text().splitlines() == ["alfworld/grpo/seed0"] * 3
    # the same profile without slices: the first slice's exit 75 ends the workflow with the run unfinished
    unsliced = FIXTURES / "sliced.yaml"
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "unsliced.yaml").write_text(
        unsliced.read_text().replace("profile: sliced", "profile: unsliced").replace("  slice_min: 30\n", ""))
    env = {**os.environ, "FAKE_TRAIN_LOG": str(tmp_path / "once.log"), "FAKE_TRAIN_SLICES": "3"}
    once = subprocess.run([*SNAKEMAKE, "runs", "--cores", "1", "--directory", str(tmp_path / "unsliced"), "--config",
                           "profile=unsliced", f"config_dir={tmp_path / 'config'}",
                           f"train_cmd={sys.executable} {FIXTURES / 'fake_train.py'}"],
                          env=env, capture_output=True, text=True, timeout=180)
    assert once.returncode != 0 and not list((tmp_path / "unsliced").glob("runs/*/*/seed0/done.json"))
    assert (tmp_path / "once.log").read_text().splitlines() == ["alfworld/grpo/seed0"]
