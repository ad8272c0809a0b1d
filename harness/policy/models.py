"""Loading a policy from a local model folder (the tiny model or a real checkpoint such as Qwen2.5-7B-Instruct).

Everything is local: ``HF_HUB_OFFLINE=1`` is set before transformers touches a model folder, and nothing is
fetched from a hub. The tokenizer lives in harness/policy/tokenizer.py, the tiny model in tiny_model.py and the
supervised warm start in warm_start.py.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers touches a model folder: nothing is fetched

from transformers import (  # noqa: E402  (HF_HUB_OFFLINE must be set first)
    AutoConfig,
    AutoModelForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from harness.policy.tokenizer import ModelNotFoundError, load_tokenizer  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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
