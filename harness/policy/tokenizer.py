"""The policy's tokenizer: the tiny model's byte-level BPE, loading a checkpoint's fast tokenizer, and the chat
turn's token ids.

Tokenizers are loaded with ``PreTrainedTokenizerFast(tokenizer_file=...)``, never ``AutoTokenizer``: on a folder
whose ``model_type`` is ``qwen2`` the latter returns ``Qwen2Tokenizer``, which re-tokenises text differently from
the ``tokenizer.json`` the model was trained with.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers touches a model folder: nothing is fetched

from transformers import PreTrainedTokenizerFast  # noqa: E402  (HF_HUB_OFFLINE must be set first)

END_OF_TURN = "<|im_end|>"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", END_OF_TURN]  # ids 0, 1, 2 in the tiny vocabulary
# Qwen-style chat template without a default system prompt (every prompt token costs time on 2 CPU cores).
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class ModelNotFoundError(FileNotFoundError):
    """A model folder that does not exist or lacks the files a model needs; the message says how to fix it."""


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
    settings = read_json_or_empty(folder / "tokenizer_config.json")
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


def read_json_or_empty(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
