"""The tiny offline policy: a ``Qwen2ForCausalLM`` built from scratch with a byte-level BPE tokenizer trained on the
benchmarks' own text, so the code path of a real Qwen2.5 checkpoint (chat template, end-of-turn token, left padding)
serves the CPU profiles too. Nothing is fetched from a hub."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Iterable

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers touches a model folder: nothing is fetched

from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM  # noqa: E402  (offline first)

from harness.policy.tokenizer import (  # noqa: E402
    CHAT_TEMPLATE,
    build_tokenizer,
    end_of_turn_id,
    read_json_or_empty,
    stop_token_ids,
)

BUILD_INFO = "build_info.json"  # written last: its presence marks a complete tiny-model folder


def build_tiny_model(cfg, corpus: Iterable[str], out_dir: Path, seed: int) -> Path:
    """Build (or reuse) the tiny Qwen2 model + tokenizer in ``out_dir``; returns ``out_dir``.

    ``cfg`` is a :class:`harness.config.ModelConfig`. The folder is reused when its ``build_info.json`` records the
    same corpus hash, shape and seed; otherwise it is rebuilt in a temporary folder and swapped in, so an
    interrupted build never leaves a half-written model behind.
    """
    texts = list(corpus)
    if not texts:
        raise ValueError("build_tiny_model: the tokenizer corpus is empty; pass the benchmarks' prompts and responses")
    out_dir = Path(out_dir)
    key = _build_key(cfg, texts, seed)
    if read_json_or_empty(out_dir / BUILD_INFO).get("key") == key:
        return out_dir
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / BUILD_INFO).exists():
        raise FileExistsError(f"{out_dir} exists and is not a tiny-model folder built by harness.policy.tiny_model; "
                              "refusing to overwrite it; choose another folder or remove it")
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = build_tokenizer(texts, cfg.tiny_vocab, tmp)
    model = _init_tiny_model(cfg, tokenizer, seed)
    model.save_pretrained(tmp)
    info = {"key": key, "seed": seed, "corpus_texts": len(texts), "parameters": model.num_parameters(),
            "shape": _shape(cfg), "vocab_size": len(tokenizer)}
    (tmp / BUILD_INFO).write_text(json.dumps(info, indent=2))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


def _init_tiny_model(cfg, tokenizer, seed: int) -> Qwen2ForCausalLM:
    hidden, heads = cfg.tiny_hidden, cfg.tiny_heads
    if hidden % heads or (hidden // heads) % 2:
        raise ValueError(f"tiny_hidden={hidden} must split into tiny_heads={heads} heads of even size (RoPE)")
    config = tiny_config(cfg, len(tokenizer), end_of_turn_id(tokenizer), tokenizer.pad_token_id)
    with torch.random.fork_rng(devices=[]):  # seeded init without disturbing the caller's RNG
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=stop_token_ids(tokenizer),
                                               pad_token_id=tokenizer.pad_token_id)
    return model


def tiny_config(cfg, vocab_size: int, eos_token_id: int | None = None, pad_token_id: int | None = None) -> Qwen2Config:
    """The tiny model's architecture (``cfg`` a :class:`harness.config.ModelConfig`); also what the memory plan
    counts for ``model.source: tiny``."""
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=cfg.tiny_hidden,
        intermediate_size=4 * cfg.tiny_hidden,
        num_hidden_layers=cfg.tiny_layers,
        num_attention_heads=cfg.tiny_heads,
        num_key_value_heads=cfg.tiny_heads,
        max_position_embeddings=8192,
        tie_word_embeddings=True,  # halves the parameters of a tiny model whose vocabulary dominates
        bos_token_id=None,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        dtype="float32",
    )


def _shape(cfg) -> dict:
    return {k: getattr(cfg, k) for k in ("tiny_hidden", "tiny_layers", "tiny_heads", "tiny_vocab")}


def _build_key(cfg, texts: list[str], seed: int) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\0")
    digest.update(json.dumps({"shape": _shape(cfg), "seed": seed, "template": CHAT_TEMPLATE}, sort_keys=True).encode())
    return digest.hexdigest()
