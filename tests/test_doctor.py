"""`python -m harness doctor`: each rule on the facts of a broken GPU machine, and the real run on this CPU one."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.doctor import Facts, problems, report, vllm_cuda_major

REPO = Path(__file__).resolve().parent.parent
VLLM_032 = ["torch==2.13.0", "transformers<5.20.0,>=5.16.1", "nvidia-cutlass-dsl[cu13]==4.8.0",
            "humming-kernels[cu13]==0.1.17", "pytest; extra == \"test\""]


def good() -> Facts:
    return Facts(torch="2.13.0", torch_cuda="13.0", gpus=["NVIDIA H100 80GB HBM3"], driver="580.95.05",
                 vllm="0.32.0", vllm_requires=VLLM_032, transformers="5.19.0")


def test_a_consistent_stack_has_no_problem():
    assert vllm_cuda_major(VLLM_032) == 13
    assert problems(good()) == []
    assert "ok: the GPU stack loads" in report(good())


def test_a_cuda_12_torch_under_vllm_032_is_named_with_the_fix():
    facts = good()
    facts.torch, facts.torch_cuda = "2.13.0+cu128", "12.8"
    [problem] = problems(facts)
    assert "CUDA 12.8, vLLM 0.32.0 for CUDA 13" in problem and "make setup-gpu" in problem


def test_transformers_outside_vllms_range_driver_allocator_and_import_failures():
    facts = good()
    facts.transformers, facts.driver = "5.25.0", "570.124.06"
    facts.alloc_conf, facts.vllm_import_error = "expandable_segments:True", "ImportError: libcudart.so.12"
    found = "\n".join(problems(facts))
    assert "transformers 5.25.0 is outside vLLM 0.32.0's range" in found
    assert "driver 570.124.06 is older than CUDA 13.0 needs (580.65" in found
    assert "expandable_segments:True" in found and "unset it" in found
    assert "importing vLLM failed (ImportError: libcudart.so.12)" in found
    assert len(problems(facts)) == 4


def test_missing_vllm_and_a_cpu_torch_on_a_gpu_machine():
    facts = Facts(torch="2.13.0+cpu", gpus=["NVIDIA H200"], driver="580.95.05", transformers="5.25.0")
    found = "\n".join(problems(facts))
    assert "CPU build on a machine with GPUs" in found and "vLLM is not installed" in found


def test_doctor_runs_on_this_machine():
    done = subprocess.run([sys.executable, "-m", "harness", "doctor"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert "torch " in done.stdout and "transformers: " in done.stdout
    import torch

    if not torch.cuda.is_available():  # the CPU machines this suite runs on
        assert done.returncode == 0 and "no GPU" in done.stdout, done.stdout + done.stderr
