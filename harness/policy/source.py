"""The policy a run starts from: a local checkpoint, or the tiny offline model with its warm start.

The tiny model (profile tiny/smoke) is built here, on this machine: a tokenizer trained on the benchmark's
own prompts and expert responses, a small Qwen2-architecture LM, then a supervised warm start on expert
demonstrations from the *train* panel (never the eval panel), so that RL starts from a policy that
sometimes succeeds. The result is cached under ``model.cache_dir`` keyed by everything it depends on, and
built under a file lock so parallel workflow jobs build it once. Where the repository ships that folder
(config/warm_starts/, harness/policy/shipped.py) it is copied instead of rebuilt, so every machine starts from the
same weights.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from envs.base import Benchmark
from harness.policy.file_lock import file_lock
from harness.policy.gguf import converted_folder, is_gguf_source
from harness.policy.models import load_policy
from harness.policy.precision import MASTER_DTYPE, storage_dtype
from harness.policy.tiny_model import build_tiny_model
from harness.policy.warm_start import format_response, warm_start

READY = "ready.json"
# model keys a run applies on top of the built model (LoRA wraps it after loading): not part of the cache key
NOT_IN_TINY_KEY = ("lora_rank", "lora_alpha", "lora_target_modules")


def demonstrations(benchmark: Benchmark, tasks, rollout_cfg, max_steps: int) -> list[tuple[str, str]]:
    """(prompt, response) pairs from the benchmark's demonstrator (its scripted expert by default), rendered
    exactly as the rollout does."""
    env = benchmark.make_env()
    pairs: list[tuple[str, str]] = []
    try:
        for task in tasks:
            obs = env.reset(task)
            expert = benchmark.demonstrator(task)
            task_text = benchmark.task_description(task, obs)
            history: list[tuple[str, str]] = []
            for turn in range(max_steps):
                action = expert.act(obs)
                prompt = benchmark.format_prompt(task_text, history, obs, turn, rollout_cfg.history_length)
                pairs += [(prompt, format_response(t, rollout_cfg.think)) for t in expert.targets(obs, action)]
                result = env.step(action)
                history.append((obs.text, action))
                obs = result.observation
                if result.done:
                    break
    finally:
        env.close()
    return pairs


def tiny_model_dir(cfg) -> Path:
    """Cache key: model shape, warm-start settings, prompt settings and benchmark options.

    Not the run seed: every seed of a grid starts from the same warm-started policy (as every seed of the paper
    starts from the same Qwen checkpoint), so seed-to-seed spread measures RL, not the warm start. Not the profile's
    name either: profiles with the same settings share one warm start (the sweep's horizon-8 cell starts where the
    cpu grid does)."""
    key = {
        "model": {k: v for k, v in dataclasses.asdict(cfg.model).items() if k not in NOT_IN_TINY_KEY},
        "think": cfg.rollout.think,
        "history_length": cfg.rollout.history_length,
        "benchmark": cfg.benchmark,
        "benchmark_options": dataclasses.asdict(cfg.benchmark_config),
    }
    if cfg.model.warm_start_context_share > 0:  # the context texts are demonstrated: a changed header rebuilds
        from envs.base import BENCHMARKS
        from harness.policy.context_demos import SCHEME
        from harness.teacher_contexts import HEADERS

        key["contexts"] = [*HEADERS.values(), BENCHMARKS.get(cfg.benchmark).skills,
                           cfg.rollout.teacher_context_tokens, SCHEME]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return Path(cfg.model.cache_dir) / f"tiny-{cfg.benchmark}-{digest}"


def local_tokenizer(cfg):
    """The run's tokenizer if its model folder is already on this machine (no weights are read), else None."""
    from harness.policy.gguf import READY as GGUF_READY
    from harness.policy.gguf import file_sha256, gguf_path
    from harness.policy.tokenizer import load_tokenizer

    if cfg.model.source == "tiny":
        folder = tiny_model_dir(cfg)
        ready = folder / READY
    elif is_gguf_source(cfg.model.source):
        try:
            path = gguf_path(cfg.model.source)
        except FileNotFoundError:
            return None
        folder = Path(cfg.model.cache_dir) / f"gguf-{path.stem}-{file_sha256(path)[:12]}"  # as converted_folder
        ready = folder / GGUF_READY
    else:
        folder = Path(cfg.model.source)
        ready = folder / "tokenizer.json"
    return load_tokenizer(folder) if ready.exists() else None


def prepare_policy(cfg, benchmark: Benchmark, device, log=print):
    """Return (model, tokenizer, model_dir) for the run, building the tiny model if needed. The weights are float32
    (trained) or, under LoRA, a frozen base in the compute dtype with a float32 adapter \
(harness/policy/precision.py)."""
    if is_gguf_source(cfg.model.source):  # a GGUF file: converted once into a folder under model.cache_dir
        model_dir = converted_folder(cfg.model.source, cfg.model.cache_dir)
    elif cfg.model.source != "tiny":
        from harness.policy.shipped import verify

        model_dir = Path(cfg.model.source)
        verify(model_dir, log)  # a shipped warm start named as the source: its hashes, before any weight loads
    else:
        model_dir = tiny_model_dir(cfg)
        ensure_tiny_model(cfg, benchmark, model_dir, log)
    model, tokenizer = load_policy(model_dir, storage_dtype(cfg.model), device)
    if cfg.model.lora_rank > 0:
        from harness.policy.lora import apply_lora

        model = apply_lora(model, cfg.model)
    return model, tokenizer, model_dir


def ensure_tiny_model(cfg, benchmark: Benchmark, model_dir: Path, log=print, rebuild: bool = False) -> None:
    """The cache folder ``model_dir`` ready: as it is, copied from the shipped one, or built (``rebuild``: built
    again whatever exists, and compared with the shipped weights)."""
    import shutil

    from harness.policy import shipped

    with file_lock(model_dir.with_suffix(".lock")):
        if rebuild and model_dir.exists():
            shutil.rmtree(model_dir)
        if (model_dir / READY).exists():
            log(f"warm start: {model_dir} (sha256 {shipped.file_sha256(model_dir / shipped.WEIGHTS)[:16]})")
        elif rebuild or not shipped.install_shipped(model_dir, log):
            build_warm_tiny_model(cfg, benchmark, model_dir, log)
            shipped.compare_rebuilt(model_dir, log)


def build_warm_tiny_model(cfg, benchmark: Benchmark, model_dir: Path, log=print) -> None:
    demo_tasks = benchmark.panel("train").tasks[: cfg.model.warm_start_demos or None]
    log(f"collecting expert demonstrations on {len(demo_tasks)} train tasks")
    demos = demonstrations(benchmark, demo_tasks, cfg.rollout, benchmark.max_steps)
    limits = [cfg.rollout.max_prompt_tokens] * len(demos)
    if cfg.model.warm_start_context_share > 0:
        from harness.policy.context_demos import context_demonstrations

        with_context = context_demonstrations(benchmark, demo_tasks, cfg.rollout, benchmark.max_steps,
                                              cfg.model.warm_start_context_share)
        log(f"+ {len(with_context)} demonstrations under a teacher context (skills, successful sibling, hindsight)")
        demos += with_context  # the tokenizer's corpus below holds the context texts too
        limits += [cfg.rollout.max_prompt_tokens + cfg.rollout.teacher_context_tokens] * len(with_context)
    corpus = [p for p, _ in demos] + [r for _, r in demos]
    base_dir = model_dir.with_name(model_dir.name + "-base")
    build_tiny_model(cfg.model, corpus, base_dir, seed=0)
    model, tokenizer = load_policy(base_dir, MASTER_DTYPE, "cpu")  # the warm start trains it: fp32
    stats = {}
    if cfg.model.warm_start_epochs > 0 and demos:
        log(f"warm start: {len(demos)} demonstration turns × {cfg.model.warm_start_epochs} epochs")
        m = cfg.model
        stats = warm_start(model, tokenizer, demos, epochs=m.warm_start_epochs, lr=m.warm_start_lr, seed=0,
                           batch_size=m.warm_start_batch, prompt_loss_weight=m.warm_start_prompt_loss,
                           warmup_fraction=m.warm_start_warmup, cosine=m.warm_start_cosine,
                           max_grad_norm=m.warm_start_max_grad_norm, prompt_limits=limits,
                           log=lambda row: log(f"warm start epoch {row['epoch']}: response loss {row['sft_loss']:.3f}"))
    model_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    (model_dir / READY).write_text(json.dumps({"demos": len(demos), "warm_start": stats}, default=float))
