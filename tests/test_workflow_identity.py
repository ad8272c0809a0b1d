"""The workflow sees a changed profile: the runs whose protocol it changed are scheduled again, the others not
(issue 18: "change steps in a profile, snakemake -n: Nothing to be done")."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "workflow_fixtures"
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]


def snakemake(work: Path, *args: str, env=None, profile: str = "grid2") -> subprocess.CompletedProcess:
    cmd = [*SNAKEMAKE, "runs", "--cores", "2", "--directory", str(work), "--config", f"profile={profile}",
           f"config_dir={work}", f"train_cmd={sys.executable} {FIXTURES / 'fake_train.py'}", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def scheduled(done: subprocess.CompletedProcess) -> int:
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", done.stdout, flags=re.M))
    return int(counts.get("train", 0))


def write_profile(work: Path, extra: str = "", name: str = "grid2") -> None:
    (work / f"{name}.yaml").write_text(f"profile: {name}\noutput_dir: runs\ngrid:\n  seeds: [0]\n"
                                       "  benchmarks: [alfworld]\n  methods: [grpo, sharpo]\n  gpus: 0\n"
                                       "  mem_mb: 1000\n  threads: 1\n  runtime_min: 5\n" + extra)


def test_changed_profile_reruns_the_runs_it_changed(tmp_path):
    env = {**os.environ, "FAKE_TRAIN_LOG": str(tmp_path / "invocations.log"), "PYTHONPATH": str(REPO)}
    write_profile(tmp_path)
    snakemake(tmp_path, env=env)
    assert scheduled(snakemake(tmp_path, "-n", env=env)) == 0  # unchanged profile: nothing to do

    write_profile(tmp_path, "seed: 0\n")  # a key at its default changes no run's protocol
    assert scheduled(snakemake(tmp_path, "-n", env=env)) == 0
    write_profile(tmp_path, "train:\n  steps: 7\n")
    assert scheduled(snakemake(tmp_path, "-n", env=env)) == 2
    write_profile(tmp_path, "per_benchmark:\n  webshop:\n    train: {steps: 7}\n")  # no run of this grid
    assert scheduled(snakemake(tmp_path, "-n", env=env)) == 0


def test_a_profile_sharing_the_runs_folder_does_not_redo_its_finished_runs(tmp_path):
    """As cpu_more shares cpu's runs: the same runs asked for by another profile's name are already made."""
    env = {**os.environ, "FAKE_TRAIN_LOG": str(tmp_path / "invocations.log"), "PYTHONPATH": str(REPO)}
    write_profile(tmp_path)
    snakemake(tmp_path, env=env)
    write_profile(tmp_path, name="grid2_more")
    assert scheduled(snakemake(tmp_path, "-n", env=env, profile="grid2_more")) == 0
