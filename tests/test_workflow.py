"""The Snakemake workflow: the grids expand into the expected train jobs (dry runs, no cluster), and a workflow
killed mid-grid finishes only the missing runs when started again (with a fake train command)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.grid.runs import load_grid

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "workflow_fixtures"
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]


def dry_run(*args: str, cwd: Path = REPO) -> dict[str, int]:
    """Job counts per rule of ``snakemake -n``."""
    done = subprocess.run([*SNAKEMAKE, "-n", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", done.stdout, flags=re.M)}


def test_paper_dry_run_lists_36_train_jobs():
    assert dry_run("--config", "profile=paper") == {"train": 36, "paper_figures": 1, "all": 1, "total": 38}


def test_slurm_profile_dry_run_lists_36_train_jobs():
    counts = dry_run("--profile", str(REPO / "profiles" / "slurm"), "--config", "profile=paper")
    assert counts["train"] == 36


def test_paper_grid_runs_and_commands():
    grid = load_grid("paper", REPO / "config")
    assert {(r.benchmark, r.label) for r in grid.runs} == {
        (b, m) for b in ("alfworld", "webshop") for m in ("grpo", "grpo_opsd", "rlsd", "sdar", "stepopsd", "sharpo")
    }
    assert sorted({r.seed for r in grid.runs}) == [0, 1, 2]
    assert grid.resources["gpus"] == 8  # one run = FSDP over one 8-GPU node
    assert grid.run("webshop/sharpo/seed2").overrides() == ["benchmark=webshop", "method=sharpo", "seed=2"]


def test_lora_grid_is_the_paper_grid_on_one_gpu_a_run():
    lora, paper = load_grid("paper_lora", REPO / "config"), load_grid("paper", REPO / "config")
    assert {r.key for r in lora.runs} == {r.key for r in paper.runs} and lora.resources["gpus"] == 1
    assert lora.output_dir != paper.output_dir
    from harness.config import load_config, to_dict

    for benchmark in ("alfworld", "webshop"):  # the same benchmarks, rollouts and evaluation as the paper profile
        lora_cfg, paper_cfg = (to_dict(load_config(REPO / "config" / f"{p}.yaml", [f"benchmark={benchmark}"]))
                               for p in ("paper_lora", "paper"))
        for section in (benchmark, "rollout", "eval"):
            assert lora_cfg[section] == paper_cfg[section], section


def test_tiny_grid_is_the_paper_grid_on_the_cpu():
    tiny, paper = load_grid("tiny", REPO / "config"), load_grid("paper", REPO / "config")
    assert {r.key for r in tiny.runs} == {r.key for r in paper.runs} and tiny.resources["gpus"] == 0


def test_smoke_grid_is_two_runs():
    grid = load_grid("smoke", REPO / "config")
    assert len(grid.runs) == 2 and grid.resources["gpus"] == 0


def write_profile(path: Path, methods: str) -> Path:
    path.write_text(f"output_dir: runs\ngrid:\n  seeds: [0]\n  benchmarks: [alfworld]\n  methods: {methods}\n")
    return path


def test_variant_labels_and_overrides_match_the_engine(tmp_path: Path):
    from harness.config import load_config

    profile = write_profile(tmp_path / "sweep.yaml", "[sharpo, {name: sharpo, lam: 0.2}, {name: sdar, beta: 0}]")
    grid = load_grid(str(profile))
    assert [r.label for r in grid.runs] == ["sharpo", "sharpo-lam0.2", "sdar-beta0.0"]
    variant = grid.run("alfworld/sharpo-lam0.2/seed0")
    assert variant.overrides() == ["benchmark=alfworld", "method=sharpo", "method.lam=0.2", "seed=0"]
    # the folder the engine would write for these overrides is the one the workflow waits for
    cfg = load_config(profile, variant.overrides())
    assert cfg.run_dir == Path("runs") / variant.key


def test_duplicate_run_folders_and_unknown_profiles_are_errors(tmp_path: Path):
    from harness.core.typed import ConfigError

    profile = write_profile(tmp_path / "dup.yaml", "[sharpo, {name: sharpo, lam: 0.05}]")  # 0.05 is the default
    with pytest.raises(ValueError, match="two entries for run folder alfworld/sharpo/seed0"):
        load_grid(str(profile))
    with pytest.raises(ConfigError, match="profile 'nope'.*profiles in"):
        load_grid("nope", tmp_path)
    with pytest.raises(ConfigError, match="unknown key"):
        load_grid(str(write_profile(tmp_path / "bad.yaml", "[grpo]\n  gpu: 2")))


@pytest.mark.slow  # ~35 s: three snakemake start-ups and four fake runs
def test_killed_workflow_finishes_only_the_missing_runs(tmp_path: Path):
    """Kill snakemake while the 4-run grid is half done; the second invocation trains only the rest."""
    log = tmp_path / "invocations.log"
    env = {**os.environ, "FAKE_TRAIN_LOG": str(log), "FAKE_TRAIN_SLEEP": "1.0"}
    args = [*SNAKEMAKE, "runs", "--cores", "1", "--directory", str(tmp_path), "--config", "profile=grid4",
            f"config_dir={FIXTURES}", f"train_cmd={sys.executable} {FIXTURES / 'fake_train.py'}"]
    first = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    done_files = lambda: sorted(tmp_path.glob("runs/*/*/seed*/done.json"))  # noqa: E731
    deadline = time.time() + 90
    while len(done_files()) < 2 and time.time() < deadline and first.poll() is None:
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGINT)  # Ctrl-C: snakemake and the running job
    first.communicate(timeout=60)
    finished = {p: (p.stat().st_mtime_ns, p.read_text()) for p in done_files()}
    assert 2 <= len(finished) < 4, f"killed too late or too early: {len(finished)} runs done"
    started_before = log.read_text().splitlines()

    second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stdout + second.stderr
    assert len(done_files()) == 4
    for path, state in finished.items():
        assert (path.stat().st_mtime_ns, path.read_text()) == state  # finished runs untouched
    rerun = log.read_text().splitlines()[len(started_before):]
    finished_keys = {str(p.parent.relative_to(tmp_path / "runs")) for p in finished}
    assert set(rerun) == {f"alfworld/{m}/seed{s}" for m in ("grpo", "sharpo") for s in (0, 1)} - finished_keys
    assert len(rerun) == len(set(rerun))


@pytest.mark.slow  # ~25 s: two snakemake start-ups and five fake runs
def test_finished_runs_are_not_retrained_when_the_workflow_changes(tmp_path: Path):
    """Snakemake re-runs a job whose command changed, deleting its output first; a finished run must survive
    that (profiles/default: rerun-triggers mtime), so only a run without done.json is ever trained."""
    env = {**os.environ, "FAKE_TRAIN_LOG": str(tmp_path / "invocations.log")}
    base = [*SNAKEMAKE, "runs", "--cores", "2", "--directory", str(tmp_path), "--config", "profile=grid4",
            f"config_dir={FIXTURES}"]
    fake = f"{sys.executable} {FIXTURES / 'fake_train.py'}"
    first = subprocess.run([*base, f"train_cmd={fake}"], env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr
    (tmp_path / "runs" / "alfworld" / "sharpo" / "seed1" / "done.json").unlink()  # one run lost its marker
    changed = subprocess.run([*base, f"train_cmd=env CHANGED=1 {fake}"], env=env, capture_output=True, text=True,
                             timeout=120)
    assert changed.returncode == 0, changed.stdout + changed.stderr
    runs = (tmp_path / "invocations.log").read_text().splitlines()
    assert sorted(runs[:4]) == sorted(f"alfworld/{m}/seed{s}" for m in ("grpo", "sharpo") for s in (0, 1))
    assert runs[4:] == ["alfworld/sharpo/seed1"]
