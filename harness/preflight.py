"""Start-up checks: every backend, optional package, device and local folder the config needs, checked before
any weights load, so a missing vLLM or a mistyped model folder fails in a second, not after a 7B load."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from harness.core.typed import ConfigError
from harness.policy.gguf import gguf_path, is_gguf_source


class StartupError(ConfigError):
    """Something the config needs is not on this machine; the message says what and how to get it."""


def importable(name: str) -> bool:
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def check_start_up(cfg, training: bool = True) -> None:
    """Raise :class:`StartupError` naming every problem; ``training`` also checks the memory plan on CUDA."""
    checks = (_backend, _strategy, _model, _device, _precision, _lora, _vllm_sleep, _allocator, _tracking,
              _benchmark_data)
    problems = [p for p in (check(cfg) for check in checks) if p]
    if problems:
        raise StartupError("; ".join(problems))
    if training:
        from harness.memory_plan import start_up_problem

        problem = start_up_problem(cfg)  # reads config.json only: a plan that cannot fit fails before any weight
        if problem:
            raise StartupError(problem)


def _backend(cfg) -> str | None:
    if cfg.backend.name == "vllm" and not importable("vllm"):
        return ("backend.name=vllm needs the vllm package, which is not installed here: `make setup-gpu` (pip "
                "install -r requirements/gpu-lock.txt) on a GPU machine (`bash scripts/setup_vllm_cpu.sh` for the CPU "
                "test venv), or pass backend.name=hf")
    return None


def _strategy(cfg) -> str | None:
    """The strategy x backend layout: a backend names the strategies it runs under (``strategies``, default one
    process) and may refuse a layout of its own (``strategy_problem(cfg)``). Whether the launch fits the strategy
    (torchrun or not) is checked when the process group is made, also before any weight loads."""
    from harness.policy.backends import BACKENDS

    cls = BACKENDS.get(cfg.backend.name)
    strategies = getattr(cls, "strategies", ("single",))
    if cfg.train.strategy not in strategies:
        return (f"backend.name={cfg.backend.name} does not run under train.strategy={cfg.train.strategy} (it runs "
                f"under {', '.join(strategies)}); pass another backend or strategy")
    check = getattr(cls, "strategy_problem", None)
    return check(cfg) if check is not None else None


def _model(cfg) -> str | None:
    if cfg.model.source == "tiny":
        return None
    if is_gguf_source(cfg.model.source):
        try:
            gguf_path(cfg.model.source)
        except FileNotFoundError as err:
            return str(err)
        return None
    folder = Path(cfg.model.source)
    if not (folder / "config.json").is_file():
        what = "has no config.json" if folder.is_dir() else "does not exist"
        return (f"model.source={cfg.model.source}: the folder {what}; pass model.source=<a local checkpoint folder "
                f"with config.json> (e.g. models/Qwen2.5-7B-Instruct) or model.source=tiny; hub ids are not fetched")
    return None


def _device(cfg) -> str | None:
    if cfg.train.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return "train.device=cuda but torch sees no CUDA GPU here; pass train.device=cpu or run on a GPU node"
    return None


def _precision(cfg) -> str | None:
    """The run's compute dtype on its device, refused as :class:`Precision` refuses it (float16 on the CPU)."""
    from harness.engine.distributed import device_type
    from harness.policy.precision import Precision

    try:
        Precision(cfg.model.dtype, device_type(cfg))
    except ValueError as err:
        return str(err)
    return None


def _lora(cfg) -> str | None:
    if cfg.model.lora_rank > 0 and not importable("peft"):
        return "model.lora_rank > 0 needs the peft package (`pip install -e .`), or pass model.lora_rank=0"
    return None


def _vllm_sleep(cfg) -> str | None:
    """Sleep level 2 discards the engine's weights; a full fine-tune's sync re-sends them all, a LoRA run's sends only
    the adapter, so the engine would wake with no base weights and generate from garbage."""
    if cfg.backend.name == "vllm" and cfg.model.lora_rank > 0 and cfg.backend.sleep_level == 2:
        return ("backend.sleep_level=2 discards the vLLM engine's base weights at every sleep, and a LoRA run "
                "(model.lora_rank > 0) never re-sends them (its sync sends the adapter only): pass "
                "backend.sleep_level=1 for LoRA runs")
    return None


def _allocator(cfg) -> str | None:
    """vLLM's sleep mode allocates through its own cuMem pool, which asserts when PyTorch's caching allocator runs
    with expandable segments (a setting FSDP users often export)."""
    from harness.engine.distributed import device_type

    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").replace(" ", "").lower()
    if cfg.backend.name == "vllm" and device_type(cfg) == "cuda" and "expandable_segments:true" in conf:
        return ("PYTORCH_CUDA_ALLOC_CONF sets expandable_segments:True, under which vLLM's sleep-mode allocator "
                "(cuMem) fails an assertion: unset it (or drop expandable_segments) for runs with backend.name=vllm, "
                "or pass backend.name=hf")
    return None


def _tracking(cfg) -> str | None:
    if cfg.tracking.enabled and not importable("mlflow"):
        return "tracking.enabled=true needs the mlflow package (`pip install -e .`), or pass tracking.enabled=false"
    return None


def _benchmark_data(cfg) -> str | None:
    from envs.base import BENCHMARKS
    from harness.core.plugins import MissingPackageError

    try:
        benchmark = BENCHMARKS.get(cfg.benchmark)  # the first import of the run's engine (textworld, bm25s ...)
    except MissingPackageError as err:
        return str(err)
    return benchmark.preflight(cfg.benchmark_config)
