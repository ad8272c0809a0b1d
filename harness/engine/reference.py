"""The KL reference policy π_ref: the frozen starting policy, scored on each step's batch (``ref_logp``).

One interface, :class:`Reference` (``logprobs(batch, micro_batch)``), and the cheapest holder the run allows,
chosen by :func:`build_reference` from the config alone:

- ``train.kl_coef: 0``: no reference at all (``None``): no copy, no forward.
- LoRA (``model.lora_rank > 0``): :class:`AdapterOff`, the policy module itself with its adapter disabled (peft's
  ``disable_adapter``): the base weights are frozen, so that *is* the starting policy, and nothing is copied.
- full fine-tune: :class:`FrozenCopy`, a deep copy of the starting weights made before the optimiser touches
  them. On a CUDA device with ``train.reference_offload`` the copy stays in CPU memory and accelerate's
  ``cpu_offload`` hooks move each layer's weights to the GPU for its forward and drop them after, so the GPU
  holds one layer of it at a time (each forward streams the whole copy over the host link once); on the CPU it
  is a plain copy. The copy is float32 like the policy and runs under the same autocast, so at step 0
  ``ref_logp`` equals ``old_logp`` exactly.

A sharded run (``train.strategy: fsdp``, harness/engine/sharding.py) shards a full fine-tune's copy like the policy:
:class:`ShardedCopy`, each rank holding 1/k of it, in place of :class:`FrozenCopy`.
"""
from __future__ import annotations

import copy
from typing import Protocol, runtime_checkable

import torch

from harness.core.batch import StepBatch
from harness.engine import sharding
from harness.engine.update import score
from harness.policy.precision import Precision


@runtime_checkable
class Reference(Protocol):
    def logprobs(self, batch: StepBatch, micro_batch: int) -> torch.Tensor:
        """log π_ref(y_t | h_t) of the batch's response tokens, ``(rows, response_len)`` float32 on the CPU."""
        ...


class AdapterOff:
    """LoRA: the policy with its adapter disabled is the frozen base, the starting policy."""

    def __init__(self, model, precision: Precision, device):
        self.model, self.precision, self.device = model, precision, torch.device(device)

    def logprobs(self, batch: StepBatch, micro_batch: int) -> torch.Tensor:
        with self.model.disable_adapter():
            return score(self.model, batch, micro_batch, self.device, self.precision)


class FrozenCopy:
    """Full fine-tune: a frozen copy of the starting weights, on the device or offloaded to CPU memory."""

    def __init__(self, model, precision: Precision, device, offload: bool):
        self.precision, self.device, self.offloaded = precision, torch.device(device), offload
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        if offload:
            from accelerate import cpu_offload

            self.model.to("cpu")
            cpu_offload(self.model, execution_device=self.device)
        else:
            self.model.to(self.device)

    def logprobs(self, batch: StepBatch, micro_batch: int) -> torch.Tensor:
        return score(self.model, batch, micro_batch, self.device, self.precision)


class ShardedCopy:
    """FSDP, full fine-tune: a frozen copy of the starting weights, sharded over the ranks like the policy and
    filled from rank 0's weights (no rank copies the whole model: the others built theirs on the meta device)."""

    def __init__(self, model, precision: Precision, device):
        self.precision, self.device = precision, torch.device(device)
        self.model = sharding.shard(model, self.device, precision.dtype, trainable=False)

    def logprobs(self, batch: StepBatch, micro_batch: int) -> torch.Tensor:
        return score(self.model, batch, micro_batch, self.device, self.precision)


def build_reference(cfg, model, precision: Precision, device) -> Reference | None:
    """The run's reference (see the module docstring), or None at ``kl_coef: 0``. ``model`` is the starting policy,
    not yet given to the optimiser or to ``accelerator.prepare``."""
    if cfg.train.kl_coef == 0:
        return None
    if cfg.model.lora_rank > 0:
        return AdapterOff(model, precision, device)
    if cfg.train.strategy == "fsdp":
        return ShardedCopy(model, precision, device)
    offload = cfg.train.reference_offload and torch.device(device).type == "cuda"
    return FrozenCopy(model, precision, device, offload=offload)
