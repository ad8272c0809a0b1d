"""The sbatch command the SLURM executor plugin builds for a train job, without a cluster: Snakemake resolves the
job's resources from the profile's grid and profiles/slurm (a dry run), and the plugin's own submit-string code
turns a job with those resources into its sbatch arguments."""
from __future__ import annotations

import logging
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.grid.runs import load_grid

slurm = pytest.importorskip("snakemake_executor_plugin_slurm")
from snakemake_executor_plugin_slurm.submit_string import get_submit_command  # noqa: E402
from snakemake_executor_plugin_slurm.utils import set_gres_string  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "workflow_fixtures"


class Resources(dict):
    """A job's resources as the plugin reads them: ``.get(name)`` and ``.name``."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def resolved_train_resources(*args: str, profile: Path = REPO / "profiles" / "slurm") -> dict:
    """The resources Snakemake gives the first train job with a SLURM profile (its dry-run report)."""
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--snakefile", str(REPO / "Snakefile"),
                           "--profile", str(profile), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    block = done.stdout.split("rule train:", 1)[1]
    line = re.search(r"^\s+resources: (.*)$", block, flags=re.M).group(1)
    pairs = (item.split("=", 1) for item in line.split(", "))
    return {key: int(value) if value.isdigit() else value for key, value in pairs}


def sbatch_call(resources: dict, threads: int) -> str:
    job = SimpleNamespace(resources=Resources(resources), threads=threads, name="train", is_group=lambda: False)
    executor = SimpleNamespace(_partitions=None, _fallback_partition=None, logger=logging.getLogger("slurm"))
    params = {"run_uuid": "uuid", "slurm_logfile": "results/slurm_logs/%j.log", "comment_str": "rule_train",
              "account": "", "partition": slurm.Executor.get_partition_arg(executor, job), "workdir": str(REPO)}
    return get_submit_command(job, params) + set_gres_string(job)


def sbatch_options(call: str) -> dict[str, str]:
    """``sbatch -p gpu --gpus=1 --parsable`` → {"-p": "gpu", "--gpus": "1", "--parsable": ""}."""
    words, options = shlex.split(call)[1:], {}
    for i, word in enumerate(words):
        if word.startswith("-"):
            name, _, value = word.partition("=")
            following = words[i + 1] if i + 1 < len(words) else "-"
            options[name] = value if "=" in word else ("" if following.startswith("-") else following)
    return options


def test_a_one_gpu_paper_run_asks_for_one_gpu_on_one_node():
    grid = load_grid("paper_lora", REPO / "config")  # the LoRA variant: one GPU a run
    call = sbatch_call(resolved_train_resources("--config", "profile=paper_lora"), grid.resources["threads"])
    options = sbatch_options(call)
    assert options["-p"] == "gpu" and options["-t"] == "2880" and options["--mem"] == "96000"  # a 48 h slice of ~150 h
    assert options["--cpus-per-task"] == "16" and options["--gpus"] == "1" and options["--nodes"] == "1"
    assert "--ntasks-per-gpu" not in call  # the srun conflict of plugin 1.9.2 (issue #373)


def test_a_paper_run_asks_for_eight_gpus_on_one_node():
    grid = load_grid("paper", REPO / "config")  # the full fine-tune: FSDP over one 8-GPU node
    options = sbatch_options(sbatch_call(resolved_train_resources("--config", "profile=paper"),
                                         grid.resources["threads"]))
    assert options["--gpus"] == "8" and options["--nodes"] == "1" and options["--mem"] == "256000"


def test_an_eight_gpu_run_asks_for_its_gpus_of_one_model_on_one_node(tmp_path: Path):
    """profiles/slurm with its gpu_model line uncommented, as its README says to pin a GPU type."""
    text = (REPO / "profiles" / "slurm" / "config.yaml").read_text()
    assert "    # gpu_model: a100" in text
    (tmp_path / "config.yaml").write_text(text.replace("    # gpu_model: a100", "    gpu_model: h100"))
    grid = load_grid("gpu8_slurm", FIXTURES)
    resources = resolved_train_resources("--config", "profile=gpu8_slurm", f"config_dir={FIXTURES}",
                                         profile=tmp_path)
    options = sbatch_options(sbatch_call(resources, grid.resources["threads"]))
    assert options["--gpus"] == "h100:8" and options["--nodes"] == "1"  # all 8 GPUs on one node
    assert options["-p"] == "gpu" and options["-t"] == "2880" and options["--mem"] == "512000"
    assert options["--cpus-per-task"] == "64"
