"""scripts/gpu_check.sh --cpu-dry-run: the GPU check's whole path (local tokenizer and random model, `python -m
harness train`, the memory plan, the report) on the CPU with tiny shapes, so the script prepared for a lent GPU
cannot rot."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_gpu_check_cpu_dry_run(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1", "OUT": ""}
    done = subprocess.run(["bash", "scripts/gpu_check.sh", "--cpu-dry-run", "--out", str(tmp_path)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [r["case"] for r in results] == ["1.5b-full", "7b-lora", "1.5b-fsdp1"]
    for r in results:
        assert r["device"] == "cpu" and r["measured_peak_gib"] is None  # no GPU memory to measure here
        assert r["plan_peak_gib"] > 0 and r["generation_tok_s"] > 0 and r["update_tok_s"] > 0
    for r in results[:2]:
        # 16 episodes of at most 2 turns
        assert len(r["rows_per_step"]) == 2 and all(16 <= n <= 32 for n in r["rows_per_step"])
    fsdp = results[2]
    assert fsdp["strategy"] == "fsdp" and len(fsdp["rows_per_step"]) == 1 and 8 <= fsdp["rows_per_step"][0] <= 16
    assert [p.name for p in tmp_path.iterdir()] == ["gpu_check.json"]  # nothing large in the output folder
    assert "peak " in done.stdout and "does not fit" not in done.stdout
