"""The tiny offline policy (tokenizer + Qwen2-architecture model), loading real checkpoints, and the SFT warm start.

Everything here is local: ``HF_HUB_OFFLINE=1`` is set before transformers touches a model folder, and nothing is
fetched from a hub. The tiny model is a ``Qwen2ForCausalLM`` built from scratch with a byte-level BPE tokenizer
trained on the benchmarks' own text, so the same code path (chat template, end-of-turn token, left padding) serves
the tiny CPU profile and a real Qwen2.5-7B-Instruct checkpoint folder.

Tokenizers are loaded with ``PreTrainedTokenizerFast(tokenizer_file=...)``, never ``AutoTokenizer``: on a folder
whose ``model_type`` is ``qwen2`` the latter returns ``Qwen2Tokenizer``, which re-tokenises text differently from
the ``tokenizer.json`` the model was trained with.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import random
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable

import torch

from harness.progress import progress

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import (  # noqa: E402  (HF_HUB_OFFLINE must be set first)
    AutoConfig,
    AutoModelForCausalLM,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

END_OF_TURN = "<|im_end|>"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", END_OF_TURN]  # ids 0, 1, 2 in the tiny vocabulary
# Qwen-style chat template without a default system prompt (every prompt token costs time on 2 CPU cores).
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
BUILD_INFO = "build_info.json"  # written last: its presence marks a complete tiny-model folder
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelNotFoundError(FileNotFoundError):
    """A model folder that does not exist or lacks the files a model needs; the message says how to fix it."""


# ---------------------------------------------------------------------------------------------------------
# tokenizer
def build_tokenizer(corpus: Iterable[str], vocab_size: int, out_dir: Path) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``corpus`` and save it (``tokenizer.json`` + config) to ``out_dir``.

    Byte-level: every string round-trips, including text never seen in the corpus. The special tokens
    ``<|endoftext|>`` (padding), ``<|im_start|>`` and ``<|im_end|>`` (end of turn = eos) are atomic.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size={vocab_size} is too small: a byte-level BPE needs at least "
                         f"{256 + len(SPECIAL_TOKENS)} (256 bytes + special tokens)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=END_OF_TURN,
        pad_token="<|endoftext|>",
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out_dir)
    return load_tokenizer(out_dir)


def load_tokenizer(folder: Path) -> PreTrainedTokenizerFast:
    """Load ``folder/tokenizer.json`` with its chat template and eos/pad/bos tokens, left padding."""
    folder = Path(folder)
    tokenizer_file = folder / "tokenizer.json"
    if not tokenizer_file.exists():
        raise ModelNotFoundError(
            f"{folder} has no tokenizer.json; a model folder needs the fast tokenizer file saved beside its weights "
            "(the tiny model's folder is written by `python -m harness build-model`)")
    settings = _read_json(folder / "tokenizer_config.json")
    special = {}
    for name in ("eos_token", "pad_token", "bos_token", "unk_token"):
        token = settings.get(name)
        if isinstance(token, dict):  # older configs store AddedToken objects
            token = token.get("content")
        if token:
            special[name] = token
    template = settings.get("chat_template")
    template_file = folder / "chat_template.jinja"  # newer transformers save the template beside the config
    if template is None and template_file.exists():
        template = template_file.read_text()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_file), padding_side="left", chat_template=template, **special
    )
    if tokenizer.pad_token is None:  # e.g. Llama-style checkpoints: pad with eos (masked out anyway)
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template is None:
        raise ModelNotFoundError(f"{folder} has no chat template (tokenizer_config.json 'chat_template' or "
                                 "chat_template.jinja); the rollout formats every prompt as a chat turn")
    return tokenizer


def chat_prompt_ids(tokenizer, prompts: list[str]) -> list[list[int]]:
    """Token ids of each user prompt wrapped in the chat template, ending with the assistant generation prompt."""
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def stop_token_ids(tokenizer) -> list[int]:
    """Ids that end a turn: eos plus ``<|im_end|>`` / ``<|endoftext|>`` where the vocabulary has them."""
    vocab = tokenizer.get_vocab()
    ids = {tokenizer.eos_token_id} | {vocab[t] for t in (END_OF_TURN, "<|endoftext|>") if t in vocab}
    return sorted(i for i in ids if i is not None)


def end_of_turn_id(tokenizer) -> int:
    """The token the policy emits to end its turn (``<|im_end|>`` for Qwen chat models, else eos)."""
    return tokenizer.get_vocab().get(END_OF_TURN, tokenizer.eos_token_id)


# ---------------------------------------------------------------------------------------------------------
# tiny model
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
    if _read_json(out_dir / BUILD_INFO).get("key") == key:
        return out_dir
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / BUILD_INFO).exists():
        raise FileExistsError(f"{out_dir} exists and is not a tiny-model folder built by harness.policy.models; "
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


def _read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


@contextmanager
def file_lock(path: Path):
    """An exclusive flock on ``path`` for the block: parallel workflow jobs build a cached model folder once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ---------------------------------------------------------------------------------------------------------
# loading
def load_policy(source: str | Path, dtype: str, device) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Load a local model folder (the tiny model or a real checkpoint) and its fast tokenizer (left padding).

    ``dtype`` is the dtype the weights are *held* in: float32 for weights that are trained (the master weights of
    harness/policy/precision.py), the compute dtype only for a frozen base \
(``harness.policy.precision.storage_dtype``)."""
    folder = Path(source)
    if not (folder / "config.json").exists():
        raise ModelNotFoundError(
            f"model folder {str(folder)!r} not found or has no config.json. For the tiny offline model run "
            "`python -m harness build-model --config <profile>`; for a real checkpoint (e.g. Qwen2.5-7B-Instruct) "
            "download it beforehand and set model.source to its local folder (nothing is fetched at run time)")
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not accepted; choose one of {sorted(DTYPES)}")
    tokenizer = load_tokenizer(folder)
    if torch.device(device).type == "meta":  # FSDP ranks but 0: the shapes only, weights broadcast at sharding
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder, local_files_only=True),
                                                     dtype=DTYPES[dtype])
        model.name_or_path = model.config._name_or_path = str(folder)  # the folder an engine loads (vllm backend)
        model.eval()
        return model, tokenizer
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPES[dtype], local_files_only=True)
    model.to(device)
    model.eval()
    return model, tokenizer


# ---------------------------------------------------------------------------------------------------------
# supervised warm start
def format_response(action: str, think: bool) -> str:
    """The response a demonstration teaches: the action in tags, with a short reasoning when thinking is on."""
    thought = f"<think>The next useful step is to {action}.</think>" if think else ""
    return f"{thought}<action>{action}</action>"


def warm_start(model, tokenizer, demos: list[tuple[str, str]], epochs: int, lr: float, seed: int,
               batch_size: int = 16, log: Callable | None = None, max_prompt_tokens: int | None = None,
               prompt_loss_weight: float = 0.0, warmup_fraction: float = 0.0, cosine: bool = False,
               max_grad_norm: float | None = None, prompt_limits: list[int] | None = None) -> dict:
    """Supervised fine-tuning on (prompt, response) pairs; the loss covers the response tokens and ``<|im_end|>``.

    The prompt goes through the chat template exactly as in a rollout (left-truncated to ``max_prompt_tokens``);
    the response is tokenised on its own, as the policy would emit it after ``<|im_start|>assistant\\n``.
    ``prompt_loss_weight`` > 0 adds that weight times the mean next-token loss on the prompt tokens: a model built
    from scratch learns to copy names from its context (the admissible actions repeat the observation's objects)
    several times faster with it, since every prompt token then teaches. The learning rate warms up linearly over
    ``warmup_fraction`` of the optimizer steps, then stays constant or (``cosine``) decays to 0.
    Returns ``{"loss_per_epoch": [...], "first_loss", "last_loss", "response_tokens", "seconds"}``; the losses are
    the response-token loss alone. ``prompt_limits`` (one per demonstration) replaces ``max_prompt_tokens`` where a
    demonstration has its own limit (a teacher's privileged prompt).
    """
    from harness.policy.logprobs import pad_left, pad_right

    if not demos:
        raise ValueError("warm_start: no demonstrations; pass (prompt, response) pairs from the benchmarks' experts")
    started = time.perf_counter()
    prompts = chat_prompt_ids(tokenizer, [p for p, _ in demos])
    if prompt_limits is not None:
        prompts = [ids[-limit:] for ids, limit in zip(prompts, prompt_limits)]
    elif max_prompt_tokens:
        prompts = [ids[-max_prompt_tokens:] for ids in prompts]
    eot = end_of_turn_id(tokenizer)
    responses = [ids + [eot] for ids in tokenizer([r for _, r in demos], add_special_tokens=False)["input_ids"]]
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    classes = [len(demos)] if prompt_limits is None else [prompt_limits.count(v) for v in set(prompt_limits)]
    total_steps = epochs * sum(-(-n // batch_size) for n in classes)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _lr_factor(step, total_steps, warmup_fraction, cosine))
    order_rng = random.Random(seed)
    was_training = model.training
    model.train()
    losses: list[float] = []
    for epoch in range(epochs):
        total, count = 0.0, 0
        batches = _batches(len(demos), batch_size, order_rng, prompt_limits)
        shown = progress(batches, total=len(batches), desc=f"warm start, epoch {epoch + 1}/{epochs}", unit="batch")
        for rows in shown:
            prompt_ids, prompt_mask = pad_left([prompts[i] for i in rows], tokenizer.pad_token_id)
            response_ids, response_mask = pad_right([responses[i] for i in rows], tokenizer.pad_token_id)
            response_loss, prompt_loss, n_tokens = _sft_losses(model, prompt_ids.to(device), prompt_mask.to(device),
                                                               response_ids.to(device), response_mask.to(device))
            loss = response_loss + prompt_loss_weight * prompt_loss if prompt_loss_weight else response_loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if max_grad_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            scheduler.step()
            total += response_loss.item() * n_tokens
            count += n_tokens
        losses.append(total / count)
        if log is not None:
            log({"epoch": epoch, "sft_loss": losses[-1]})
    model.train(was_training)
    optimizer.zero_grad(set_to_none=True)
    return {"loss_per_epoch": losses, "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None, "response_tokens": sum(map(len, responses)),
            "seconds": time.perf_counter() - started}


def _batches(count: int, batch_size: int, rng: random.Random, limits: list[int] | None) -> list[list[int]]:
    """Shuffled mini-batches of demonstration indices. Demonstrations with different prompt limits (a teacher's
    longer privileged prompts) are batched apart, so a plain prompt is not left-padded to a context's length."""
    order = list(range(count))
    rng.shuffle(order)
    if limits is None or len(set(limits)) == 1:
        return [order[start:start + batch_size] for start in range(0, count, batch_size)]
    batches = []
    for limit in sorted(set(limits)):
        same = [i for i in order if limits[i] == limit]
        batches += [same[start:start + batch_size] for start in range(0, len(same), batch_size)]
    rng.shuffle(batches)
    return batches


def _lr_factor(step: int, total_steps: int, warmup_fraction: float, cosine: bool) -> float:
    warmup = int(warmup_fraction * total_steps)
    if step < warmup:
        return (step + 1) / warmup
    if not cosine:
        return 1.0
    progress = (step - warmup) / max(1, total_steps - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def _sft_losses(model, prompt_ids, prompt_mask, response_ids, response_mask):
    """(mean response-token NLL, mean prompt-token NLL, number of response tokens) in one forward pass."""
    from harness.policy.logprobs import position_ids_from_mask

    ids = torch.cat([prompt_ids, response_ids], dim=1)
    mask = torch.cat([prompt_mask, response_mask], dim=1).bool()
    logits = model(input_ids=ids, attention_mask=mask.long(), position_ids=position_ids_from_mask(mask)).logits
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].float().transpose(1, 2), ids[:, 1:], reduction="none")
    target_mask = mask[:, 1:]
    is_response = torch.zeros_like(mask)
    is_response[:, prompt_ids.shape[1]:] = response_mask.bool()
    is_response = is_response[:, 1:]
    is_prompt = target_mask & mask[:, :-1] & ~is_response
    n_response = int(is_response.sum())
    response_loss = (nll * is_response).sum() / max(1, n_response)
    prompt_loss = (nll * is_prompt).sum() / is_prompt.sum().clamp(min=1)
    return response_loss, prompt_loss, n_response
