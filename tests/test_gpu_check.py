"""scripts/gpu_check.sh --cpu-dry-run: the GPU check's whole path (local tokenizer and random model, `python -m
harness train`, the memory plan, the report) on the CPU with tiny shapes, so the script prepared for a lent GPU
cannot rot. It runs as on a bare GPU machine: textworld, alfworld, bm25s and rapidfuzz cannot be imported
(tests/block_imports), and every case's plan at its GPU shape must fit an 80 GB H100 and a 139 GB H200."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


BARE_GPU_MACHINE = "textworld,alfworld,bm25s,rapidfuzz"  # not on a GPU node that has torch, transformers, peft


def blocked_env(packages: str) -> dict:
    path = os.pathsep.join([str(REPO / "tests" / "block_imports"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1", "OUT": "", "PYTHONPATH": path,
            "BLOCK_PACKAGES": packages}


def test_gpu_check_cpu_dry_run(tmp_path):
    env = blocked_env(BARE_GPU_MACHINE)
    done = subprocess.run(["bash", "scripts/gpu_check.sh", "--cpu-dry-run", "--out", str(tmp_path)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [r["case"] for r in results] == ["7b-cut4", "throughput", "teacher-pass", "decode", "1.5b-fsdp1",
                                            "7b-lora", "1.5b-full"]
    kernels = {r["case"]: r for r in results[1:4]}
    cases = [results[0], *results[4:]]
    assert all(r["device"] == "cpu" for r in results)
    for r in cases:
        assert r["measured_peak_gib"] is None  # no GPU memory to measure here
        assert r["plan_peak_gib"] > 0 and r["generation_tok_s"] > 0 and r["update_tok_s"] > 0
        assert set(r["phases"]) == {"generation", "scoring", "update"}  # plan beside measured, per phase
        assert all(p["plan_gib"] >= 0 and p["allocated_gib"] is None for p in r["phases"].values())
    for r in (cases[0], *cases[2:]):
        # 16 episodes of at most 2 turns
        assert len(r["rows_per_step"]) == 2 and all(16 <= n <= 32 for n in r["rows_per_step"])
    fsdp = cases[1]
    assert fsdp["strategy"] == "fsdp" and len(fsdp["rows_per_step"]) == 1 and 8 <= fsdp["rows_per_step"][0] <= 16
    assert kernels["throughput"]["tok_s"] > 0 and kernels["throughput"]["mfu"] is None  # no MFU without a GPU
    assert kernels["teacher-pass"]["row_tokens"] > kernels["throughput"]["row_tokens"]  # the teacher's context
    assert kernels["decode"]["batch_2"]["tok_s"] > 0
    assert [p.name for p in tmp_path.iterdir()] == ["gpu_check.json"]  # nothing large in the output folder
    assert "peak " in done.stdout and "does not fit" not in done.stdout
    for r in cases:  # the plan of the case's GPU shape (7B cut, 1.5B, 7B LoRA, 1.5B FSDP at 2,560 tokens) fits both
        assert set(r["gpu_shape_plan_gib"]) == {"80", "139"}
        assert r["gpu_shape_plan_gib"]["80"] <= 80 and r["gpu_shape_plan_gib"]["139"] <= 139, r
    assert 40 < fsdp["gpu_shape_plan_gib"]["80"] < 80  # the 1.5B FSDP case at micro-batch 2 (8 planned 91.2)


def test_model_flops_count_layers_on_every_token_and_the_head_on_the_response():
    from scripts.gpu_check import TINY
    from scripts.gpu_kernels import model_flops, paper_model

    model = paper_model(TINY, cuda=False)
    c = model.config
    embedding = c.vocab_size * c.hidden_size
    layers = sum(p.numel() for p in model.parameters()) - 2 * embedding  # untied: the head is a second matrix
    # by hand, per layer: q 64·64+64, k and v 64·32+32 each, o 64·64, MLP 3·64·128, two norms 64; + the final norm
    assert layers == 2 * (4160 + 2 * 2080 + 4096 + 24576 + 128) + 64 == 74304
    rows, prompt, response = 3, 40, 10
    per_token = 6 * layers + 6 * c.num_hidden_layers * c.hidden_size * (prompt + response)
    assert model_flops(model, rows, prompt, response) == rows * ((prompt + response) * per_token
                                                                 + response * 6 * embedding)


def test_gpu_check_names_a_missing_package_before_any_case(tmp_path):
    done = subprocess.run(["bash", "scripts/gpu_check.sh", "--cpu-dry-run", "--out", str(tmp_path)], cwd=REPO,
                          env=blocked_env("peft"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "['peft'] are not installed" in done.stderr, done.stderr
    assert not (tmp_path / "gpu_check.json").exists()


def test_a_config_loads_without_other_benchmarks_packages_and_the_runs_own_is_named():
    code = ("from harness.config import load_config\n"
            "from harness.preflight import check_start_up, StartupError\n"
            "assert load_config('config/cpu.yaml').benchmark == 'gates'\n"
            "cfg = load_config('config/smoke.yaml', ['benchmark=alfworld', 'backend.name=hf'])\n"
            "try:\n    check_start_up(cfg, training=False)\nexcept StartupError as err:\n    print(err)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=blocked_env(BARE_GPU_MACHINE),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "benchmark 'alfworld' needs the package 'textworld', which is not installed here" in done.stdout
