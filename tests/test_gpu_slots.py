"""Local multi-GPU scheduling: Snakemake's gpu counter plus harness/gpu_slots.py give every train job its own
devices. No GPU is needed: the ids are what CUDA_VISIBLE_DEVICES would carry, the train command is a stand-in."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.gpu_slots import acquire, device_pool, job_threads, lock_path, try_lock, wrapper_prefix

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "workflow_fixtures"
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
WRAPPER = [sys.executable, "-m", "harness.gpu_slots"]


def env_for(tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    return {**env, "PYTHONPATH": str(REPO), "GPU_SLOTS_DIR": str(tmp_path / "locks"), **extra}


def test_the_pool_is_the_declared_gpus():
    assert device_pool(8, None) == [str(i) for i in range(8)]
    assert device_pool(2, "5,3,7") == ["5", "3"]  # the first G of what snakemake itself was shown
    assert device_pool(None, "1,2") is None  # nothing declared: the job's own environment decides
    with pytest.raises(ValueError, match="gpu=4 declares more GPUs than CUDA_VISIBLE_DEVICES='0,1'"):
        device_pool(4, "0,1")


def test_threads_are_shared_so_every_gpu_gets_a_job():
    assert job_threads(8, 1, 8, 8) == 1  # --cores 8, 8 one-GPU jobs: 1 thread each, all 8 at once
    assert job_threads(8, 1, 8, 64) == 8
    assert job_threads(8, 4, 8, 16) == 8  # 2 four-GPU jobs at once
    assert job_threads(8, 1, 8, 4) == 1  # fewer cores than GPUs: the cores are the limit, nothing to gain
    assert job_threads(8, 1, None, 64) == 8  # no declared GPUs (SLURM, dry runs): the profile's count
    assert job_threads(1, 0, 8, 64) == 1  # CPU profiles keep theirs


def test_the_prefix_wraps_local_jobs_only():
    assert wrapper_prefix("py", 1, 8, None, local=True) == "py -m harness.gpu_slots --gpus 1 --pool 0,1,2,3,4,5,6,7 -- "
    assert wrapper_prefix("py", 0, None, None, local=True) == "py -m harness.gpu_slots --gpus 0 -- "
    assert wrapper_prefix("py", 1, 8, None, local=False) == ""  # SLURM places and isolates each job itself


def test_acquire_takes_free_ids_all_or_none(tmp_path: Path):
    pool = ["0", "1", "2", "3"]
    first, first_fds = acquire(3, pool, tmp_path)
    assert first == ["0", "1", "2"]
    with pytest.raises(TimeoutError, match="no 2 free GPUs"):
        acquire(2, pool, tmp_path, timeout=0.3, poll=0.05)
    probe = try_lock(lock_path(tmp_path, "3"))
    assert probe is not None  # the failed attempt released what it had taken
    for fd in [*first_fds, probe]:
        os.close(fd)
    assert acquire(4, pool, tmp_path)[0] == pool
    with pytest.raises(ValueError, match="takes 5 GPUs but only 4"):
        acquire(5, pool, tmp_path)


def test_the_command_gets_its_ids_and_holds_them_until_it_dies(tmp_path: Path):
    """The locks pass to the exec'd command: held while it runs, freed when it is SIGKILLed (no cleanup runs)."""
    env = env_for(tmp_path)
    hold = "import os, sys, time; print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); time.sleep(60)"
    job = subprocess.Popen([*WRAPPER, "--gpus", "2", "--pool", "4,5,6", "--", sys.executable, "-c", hold], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "4,5"
        other = subprocess.run([*WRAPPER, "--gpus", "1", "--pool", "4,5,6", "--", sys.executable, "-c",
                                "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"],
                               env=env, capture_output=True, text=True, timeout=30)
        assert other.stdout.strip() == "6"  # disjoint from the running job's
        busy = subprocess.run([*WRAPPER, "--gpus", "2", "--pool", "4,5,6", "--timeout", "0.5", "--", "true"],
                              env=env, capture_output=True, text=True, timeout=30)
        assert busy.returncode != 0 and "no 2 free GPUs" in busy.stderr
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=30)
    assert acquire(3, ["4", "5", "6"], tmp_path / "locks")[0] == ["4", "5", "6"]


def test_a_cpu_job_sees_no_gpu(tmp_path: Path):
    done = subprocess.run([*WRAPPER, "--gpus", "0", "--", sys.executable, "-c",
                           "import os; print(repr(os.environ['CUDA_VISIBLE_DEVICES']))"],
                          env=env_for(tmp_path, CUDA_VISIBLE_DEVICES="0,1"), capture_output=True, text=True,
                          timeout=30)
    assert done.stdout.strip() == "''", done.stderr


def run_grid(tmp_path: Path, profile: str, barrier: int, cores: int, gpus: int, **env_extra: str) -> list[dict]:
    """Run a fixture grid under snakemake with the fake train command; the device record of every job."""
    devices = tmp_path / "devices.jsonl"
    env = env_for(tmp_path, FAKE_TRAIN_LOG=str(tmp_path / "invocations.log"), FAKE_TRAIN_DEVICES_LOG=str(devices),
                  FAKE_TRAIN_BARRIER=str(barrier), FAKE_TRAIN_BARRIER_TIMEOUT="40", **env_extra)
    args = [*SNAKEMAKE, "runs", "--cores", str(cores), "--resources", f"gpu={gpus}", "--directory", str(tmp_path),
            "--config", f"profile={profile}", f"config_dir={FIXTURES}",
            f"train_cmd={sys.executable} {FIXTURES / 'fake_train.py'}"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line) for line in devices.read_text().splitlines()]


def test_eight_one_gpu_jobs_run_at_once_on_eight_distinct_gpus(tmp_path: Path):
    """The paper's shape (1 GPU, threads 8) with --cores 8 --resources gpu=8: all 8 jobs at once, one GPU each."""
    jobs = run_grid(tmp_path, "gpu8", barrier=8, cores=8, gpus=8)
    assert len(jobs) == 8
    assert all(job["saw_all_start"] for job in jobs), "the 8 jobs did not all run at the same time"
    assert sorted(job["devices"] for job in jobs) == [str(i) for i in range(8)]
    assert {job["threads"] for job in jobs} == {"1"}  # 8 cores shared by 8 jobs


def test_two_four_gpu_jobs_get_disjoint_sets_of_the_declared_gpus(tmp_path: Path):
    """10 GPUs visible, 8 declared: the two 4-GPU jobs split the first 8 and never touch devices 8 and 9."""
    jobs = run_grid(tmp_path, "gpu4x2", barrier=2, cores=8, gpus=8, CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7,8,9")
    assert len(jobs) == 2 and all(job["saw_all_start"] for job in jobs)
    sets = [set(job["devices"].split(",")) for job in jobs]
    assert all(len(s) == 4 for s in sets) and not sets[0] & sets[1]
    assert sets[0] | sets[1] == {str(i) for i in range(8)}
    assert {job["threads"] for job in jobs} == {"4"}  # 8 cores for the 2 jobs that fit on 8 GPUs
