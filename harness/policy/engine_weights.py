"""What a generation engine with its own copy of the weights (vLLM) receives from the trainer after an update.

* A plain (or FSDP-sharded) model: :func:`stream_weights`, a generator of (checkpoint name, full tensor in the
  engine's dtype), one parameter at a time. Under FSDP each tensor is gathered from its shards (``full_tensor()``,
  a collective every rank runs in the same order) only when the engine asks for it, and dropped once loaded, so
  the sync holds one full parameter at a time rather than the whole model (verl's and TRL's per-tensor loops).
* A LoRA (peft) model: only the adapter, :func:`adapter_tensors` in peft's saved-file names and in float32, and
  :func:`save_adapter` writes them as a peft folder an engine loads as a LoRA request. The engine keeps its bf16
  base and adds ``(alpha / r) x A^T B^T``; merging ``W + (alpha / r) B A`` into a bf16 ``W`` instead rounds a
  small update away (bf16 keeps 8 significant bits of W: an update 1e-4 of W's size is mostly lost).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch

from harness.policy.lora import ADAPTER, is_lora


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: gathered from its shards for an FSDP DTensor (a collective), else the tensor itself."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def stream_weights(model, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor cast to ``dtype``) for every entry of ``model``'s state dict, produced one at a time."""
    if is_lora(model):
        raise ValueError("a LoRA model's engine gets its adapter (adapter_tensors / save_adapter), not its weights")
    for name, tensor in model.state_dict().items():
        yield name, full(tensor.detach()).to(dtype)


def adapter_tensors(model) -> Iterator[tuple[str, torch.Tensor]]:
    """(peft file name, full float32 tensor) of every adapter tensor of a peft model, one at a time: the names
    peft's ``save_pretrained`` writes (``base_model.model.<module>.lora_A.weight``, no adapter name)."""
    marker = f".{ADAPTER}."
    for name, tensor in model.state_dict().items():
        if ".lora_" not in name:
            continue
        yield name.replace(marker, "."), full(tensor.detach()).float().contiguous()


def save_adapter(model, folder: Path) -> Path:
    """Write ``model``'s adapter as a peft folder (``adapter_config.json``, ``adapter_model.safetensors``); every
    FSDP rank must call it (the tensors are gathered). Returns ``folder``."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {name: tensor.cpu() for name, tensor in adapter_tensors(model)}
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    model.peft_config[ADAPTER].save_pretrained(str(folder))  # adapter_config.json: r, alpha, target modules
    return folder


def lora_rank(model) -> int:
    return int(model.peft_config[ADAPTER].r)
