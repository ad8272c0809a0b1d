"""scripts/check_gpu_env.py's judgement of a resolved GPU set (the resolver run itself is `make check-gpu-env`)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("check_gpu_env", REPO / "scripts" / "check_gpu_env.py")
check_gpu_env = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_gpu_env)

CUDA13 = """torch==2.13.0
vllm==0.32.0
transformers==5.19.0
cuda-toolkit==13.0.3.0
nvidia-cuda-runtime==13.0.96
nvidia-nccl-cu13==2.29.7
nvidia-cudnn-cu13==9.20.0.48
nvidia-cutlass-dsl-libs-cu12==4.8.0
"""


def test_the_committed_lock_is_one_cuda_major():
    locked = check_gpu_env.pins(check_gpu_env.LOCK.read_text())
    assert check_gpu_env.problems(locked) == []
    assert set(check_gpu_env.torch_cuda_majors(locked).values()) == {13}


def test_a_consistent_set_passes():
    assert check_gpu_env.problems(check_gpu_env.pins(CUDA13)) == []


def test_a_cuda_12_torch_with_vllm_032_is_refused():
    text = CUDA13.replace("torch==2.13.0", "torch==2.13.0+cu128").replace("nvidia-nccl-cu13", "nvidia-nccl-cu12")
    [problem] = check_gpu_env.problems(check_gpu_env.pins(text))
    assert "built for CUDA 13" in problem and "torch==2.13.0+cu128" in problem and "nvidia-nccl-cu12" in problem


def test_transformers_torch_and_unsupported_vllm():
    text = CUDA13.replace("transformers==5.19.0", "transformers==5.25.0").replace("torch==2.13.0", "torch==2.12.0")
    found = "\n".join(check_gpu_env.problems(check_gpu_env.pins(text)))
    assert "transformers==5.25.0 is outside" in found and "torch==2.12.0 but vllm==0.32.0" in found
    assert "not a release this project supports" in check_gpu_env.problems(
        check_gpu_env.pins(CUDA13.replace("vllm==0.32.0", "vllm==0.40.1")))[0]
