"""Start-up refusals of GPU layouts that cannot work, each shown on the CPU: LoRA under vLLM's sleep level 2, and
vLLM's allocator under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."""
from __future__ import annotations

from harness import preflight
from harness.config import load_config

VLLM = ["backend.name=vllm", "model.source=tiny"]


def test_lora_with_sleep_level_2_is_refused_with_the_fix():
    cfg = load_config("config/smoke.yaml", VLLM + ["model.lora_rank=8", "backend.sleep_level=2"])
    problem = preflight._vllm_sleep(cfg)
    assert "never re-sends them" in problem and "pass backend.sleep_level=1" in problem
    assert preflight._vllm_sleep(load_config("config/smoke.yaml", VLLM + ["model.lora_rank=8"])) is None
    assert preflight._vllm_sleep(load_config("config/smoke.yaml", VLLM + ["backend.sleep_level=2"])) is None


def test_expandable_segments_under_vllm_on_cuda_is_refused(monkeypatch):
    cuda = load_config("config/smoke.yaml", VLLM + ["train.device=cuda"])
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512, expandable_segments:True")
    problem = preflight._allocator(cuda)
    assert "expandable_segments:True" in problem and "unset it" in problem
    assert preflight._allocator(load_config("config/smoke.yaml", ["backend.name=hf", "train.device=cuda"])) is None
    assert preflight._allocator(load_config("config/smoke.yaml", VLLM + ["train.device=cpu"])) is None
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")
    assert preflight._allocator(cuda) is None
