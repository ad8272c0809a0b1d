"""The memory plan's vocabulary (the model's ``Shape``, a ``Row``, the phases of a step) and its rows for what \
the FSDP x vLLM layout holds besides the states and
activations: added by :func:`harness.memory_plan.make_plan`. Each is arithmetic on the model's shape; the bytes per
element are read off the tensors the code keeps alive at once (estimates until ``scripts/gpu_check.sh`` measures
a peak on a GPU).

* PyTorch's cached-but-free blocks at the engine's wake: what the scoring, backward and optimizer step allocated
  on top of the persistent states stays in PyTorch's cache after the update. vLLM empties that cache when it
  sleeps, not when it wakes; the backend calls ``gc.collect()`` and ``torch.cuda.empty_cache()`` before every
  wake (harness/policy/backends/vllm.py), so generation holds none of it. The row says how much it would be.
* FSDP + ``hf`` generation: the rank generates on its full module (``distributed.full_weights`` unshards every
  unit), so beyond the root and two layers already counted it holds the rest of the model in the compute dtype.
* The root unit's fp32 reduce-scatter buffer: with ``reduce_dtype`` fp32, the root unit's (embeddings, final
  norm, lm_head) unsharded gradients are cast to fp32 before their reduce-scatter, 4 bytes a root parameter on top
  of the compute-dtype gradients (full fine-tune; a LoRA root is frozen).
"""
from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30
MASTER_BYTES = 4  # fp32 master weights, gradients and each AdamW moment
PHASES = {"gen": "generation", "score": "scoring (old/ref log-probs)", "bwd": "backward", "step": "optimizer step"}


@dataclass(frozen=True)
class Shape:
    """What the plan needs of the model, counted on the meta device."""

    arch: str
    source: str  # where the config came from, and why
    params: int
    trained: int
    layers: int
    layer_params: int
    hidden: int
    intermediate: int
    kv_dim: int
    vocab: int
    largest_module_params: int  # the most parameters one module holds itself (an embedding or lm_head)

    @property
    def root_params(self) -> int:
        """Parameters outside the decoder layers: embeddings, final norm, lm_head (FSDP's root unit)."""
        return self.params - self.layers * self.layer_params


@dataclass(frozen=True)
class Row:
    label: str
    bytes: int
    phases: tuple[str, ...]
    allowance: bool = False  # the reserve: not an allocation torch.cuda.max_memory_allocated would see

# The logits' backward: the c-byte logits, their fp32 upcast (kept for the backward), the fp32 log-softmax
# output, an fp32 temporary of its backward and the fp32 gradient: c + 16 bytes an element (18 in bf16). The
# review against verl put it at 16-18; the plan takes the upper end. An estimate until a GPU measures it.
LOGITS_BACKWARD_EXTRA_BYTES = 16


def layout_rows(cfg, shape: Shape, rows: list[Row], k: int, c: int) -> list[Row]:
    """The rows above for ``cfg``, given the plan's other ``rows`` (without the reserve)."""
    out = []
    if cfg.train.strategy == "fsdp" and cfg.backend.name == "hf":
        rest = shape.params - shape.root_params - 2 * shape.layer_params
        out.append(Row(f"FSDP + hf generation: the rest of the model unsharded ({cfg.model.dtype})", c * rest,
                       ("gen",)))
    if cfg.train.strategy == "fsdp" and cfg.model.lora_rank == 0:
        out.append(Row("FSDP root unit's gradients in fp32 for the reduce-scatter (reduce_dtype)",
                       MASTER_BYTES * shape.root_params, ("bwd",)))
    if cfg.backend.name == "vllm":  # hf: the same allocator reuses its own cache
        out.append(_cached_row(rows + out))
    return out


def _cached_row(rows: list[Row]) -> Row:
    persistent = sum(r.bytes for r in rows if set(r.phases) == set(PHASES))
    update = max(sum(r.bytes for r in rows if phase in r.phases) for phase in ("score", "bwd", "step"))
    cached = max(0, update - persistent)
    return Row(f"PyTorch's cached-but-free blocks at the engine's wake: emptied before it (would be "
               f"{cached / GIB:.1f} GiB)", 0, ("gen",))
