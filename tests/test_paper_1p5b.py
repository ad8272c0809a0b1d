"""config/paper_1p5b.yaml, the verl-agent papers' 1.5B protocol: it loads for both benchmarks with the papers'
batch (16 tasks × group 8) on Qwen2.5-1.5B-Instruct's shipped shape, every method of its grid plans within 2 × 80 GB,
and its main table prints the published 1.5B numbers (GiGPO's Table 1, HGPO, GraphGPO, G2PO) beside its own."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from workflow_fixtures.synthetic_runs import write_run

from harness import memory_plan
from harness.config import load_config
from harness.core.typed import ConfigError
from harness.grid.runs import load_grid
from paper_figures import tables
from paper_figures.build import build

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "config" / "paper_1p5b.yaml"
QWEN_1P5B_PARAMS = 1_543_714_304  # counted on the meta device (tied embeddings: one 151936 × 1536 matrix)


def test_the_profile_is_the_papers_1p5b_batch_on_2_gpus():
    grid = load_grid(str(PROFILE))
    assert grid.resources["gpus"] == 2 and {r.benchmark for r in grid.runs} == {"alfworld", "webshop"}
    assert {"grpo", "gigpo", "hgpo", "sharpo"} <= set(grid.method_labels)
    for benchmark in ("alfworld", "webshop"):
        cfg = load_config(PROFILE, [f"benchmark={benchmark}"])
        assert (cfg.profile, cfg.rollout.tasks_per_step, cfg.rollout.group_size) == ("paper_1p5b", 16, 8)
        assert (cfg.train.strategy, cfg.backend.name) == ("fsdp", "vllm")
        assert cfg.model.source.endswith("Qwen2.5-1.5B-Instruct") and cfg.model.lora_rank == 0


def test_every_method_of_the_grid_plans_within_2_x_80_gib():
    shape = memory_plan.model_shape(load_config(PROFILE))
    assert shape.params == QWEN_1P5B_PARAMS and "Qwen2.5-1.5B-Instruct.json, the shipped copy" in shape.source
    for label in load_grid(str(PROFILE)).method_labels:  # a teacher method scores longer rows: its own plan
        plan = memory_plan.make_plan(load_config(PROFILE, [f"method={label}"]), 80)
        assert plan.fits and plan.peak_gib() <= 80, (label, plan.peak_line())
        assert "FSDP over 2 GPUs" in plan.title


def test_the_plan_command_fits_the_profile_on_80_gib():
    done = subprocess.run([sys.executable, "-m", "harness", "plan", "--config", str(PROFILE), "--gpu-gib", "80"],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].endswith(": fits")


def test_a_model_with_no_config_here_and_none_shipped_is_named():
    with pytest.raises(ConfigError, match="no shipped copy is named Qwen2.5-3B-Instruct.json.*download"):
        memory_plan.model_shape(load_config(PROFILE, ["model.source=models/Qwen2.5-3B-Instruct"]))


@pytest.mark.filterwarnings("ignore:.*no readable protocol.json")  # a synthetic run: no resolved config
def test_the_main_table_prints_the_published_1p5b_numbers_beside(tmp_path):
    published = tables.load_reference(tables.reference_of(str(PROFILE)))
    quoted = {(r.benchmark, r.method): (r.success_pct, r.plus_minus) for r in published.itertuples()}
    assert quoted[("alfworld", "grpo")] == (72.8, 3.6) and quoted[("alfworld", "gigpo")] == (86.7, 1.7)
    assert quoted[("alfworld", "hgpo")][0] == 92.8 and quoted[("alfworld", "graphgpo")][0] == 92.71
    assert quoted[("webshop", "graphgpo")][0] == 78.65 and quoted[("alfworld", "g2po")][0] == 95.0
    assert quoted[("webshop", "g2po")][0] == 71.2
    runs = tmp_path / "runs"
    write_run(runs, "alfworld", "grpo", 0, 0.5)
    build(runs, tmp_path / "out", profile=str(PROFILE), reps=20, figures=False)
    main = (tmp_path / "out" / "tables" / "main.md").read_text()
    assert "| 72.80 ± 3.60 |" in main and "| 86.70 ± 1.70 |" in main and "| 92.80 |" in main
    assert "arXiv 2505.10978 (GiGPO)" in main and "2610.00838" not in main  # not the 7B paper's caption
    tidy = pd.read_csv(tmp_path / "out" / "tables" / "main.csv")
    assert set(tidy.loc[tidy["paper_success_pct"].notna(), "method"]) >= {"grpo", "gigpo", "hgpo"}


def test_a_published_file_that_is_not_there_is_named(tmp_path):
    profile = tmp_path / "mine.yaml"
    profile.write_text("extends: " + str(PROFILE) + "\nprofile: mine\ngrid:\n  published: nowhere.csv\n")
    with pytest.raises(ConfigError, match="grid.published='nowhere.csv' is not a file.*verl_agent_1p5b.csv"):
        tables.reference_of(str(profile))
