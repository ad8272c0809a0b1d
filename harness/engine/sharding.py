"""Building the FSDP module at start-up: ``fully_shard`` over a meta twin of the model, and each rank's shard of
rank 0's weights, so that no rank but 0 ever holds a full copy (docs/gpus.md, item 3)."""
from __future__ import annotations

import copy

import torch


def shard(model, device, compute_dtype: torch.dtype, trainable: bool = True):
    """``fully_shard`` each decoder layer (transformers' ``_no_split_modules``) and then the whole model; returns
    the sharded module (a new one: ``model`` itself is left as it was).

    The weights come from rank 0 alone: the other ranks may pass a model built on the meta device
    (``harness.engine.distributed.loads_on_meta``), so no rank but 0 ever holds a full copy. The sharded module is
    built from a meta twin of ``model`` (nothing copied), its shards allocated on ``device``, and each of rank 0's
    tensors is scattered, one at a time, so that a rank receives its own rows only (:func:`scatter_from_rank0`);
    the buffers, which the state dict leaves out (rotary frequencies), are broadcast.

    Trained parameters are held in fp32 (master weights, as verl keeps them) and FSDP casts the gathered copies
    to ``compute_dtype`` for forward and backward; gradients are reduced in fp32. ``trainable=False`` shards a
    frozen copy (the KL reference) of the same weights."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    source = dist.get_rank() == 0
    full_state = dict(model.state_dict()) if source else {}  # rank 0's full tensors, referenced, not copied
    buffers = {name: buf for name, buf in model.named_buffers()} if source else {}
    twin = meta_copy(model)
    if not trainable:
        twin.eval().requires_grad_(False)
    for param in twin.parameters():
        if param.requires_grad and param.dtype != torch.float32:
            param.data = param.data.float()
    policy = (MixedPrecisionPolicy() if compute_dtype == torch.float32
              else MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32))
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    block_names = set(getattr(twin, "_no_split_modules", None) or ())
    for module in [m for m in twin.modules() if type(m).__name__ in block_names]:
        fully_shard(module, mesh=mesh, mp_policy=policy)
    twin = fully_shard(twin, mesh=mesh, mp_policy=policy)
    twin.to_empty(device=device)
    scatter_from_rank0(twin, full_state)
    with torch.no_grad():
        for name, buf in twin.named_buffers():
            if source:
                buf.copy_(buffers[name])
            dist.broadcast(buf, src=0)
    return twin


def scatter_from_rank0(sharded: torch.nn.Module, full_state: dict) -> None:
    """Fill every parameter shard of ``sharded`` (FSDP2: dim 0 split as ``torch.chunk`` splits it) from rank 0's
    full tensors in ``full_state`` (empty on the other ranks).

    verl's ``fsdp2_load_full_state_dict`` broadcasts each full tensor (``set_model_state_dict`` with
    ``broadcast_from_rank0``), so every rank holds the largest tensor whole for a moment; a scatter sends each rank
    its own rows, so a rank's peak is its shard plus one chunk (``perf/rank0_load.py`` measures both)."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    with torch.no_grad():
        for name, param in sharded.named_parameters():
            local = param.to_local()
            rows = param.shape[0]
            chunk = -(-rows // world)
            expected = max(0, min(chunk, rows - rank * chunk))
            if local.shape[0] != expected:
                raise RuntimeError(f"{name}: this rank holds {local.shape[0]} rows of {rows}, not the {expected} of "
                                   f"a torch.chunk split over {world} ranks; the sharding is not FSDP2's Shard(0)")
            received = local.new_empty((chunk, *param.shape[1:]))
            pieces = None
            if rank == 0:
                full = full_state[name].to(device=local.device, dtype=local.dtype)
                pieces = [_padded(piece, received) for piece in full.split(chunk)]  # views, but a short last one
                pieces += [torch.zeros_like(received)] * (world - len(pieces))  # ranks past the last row
            dist.scatter(received, pieces, src=0)
            local.copy_(received[:expected])


def _padded(piece: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if piece.shape == like.shape:
        return piece.contiguous()
    out = torch.zeros_like(like)
    out[:piece.shape[0]] = piece
    return out


def meta_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``module`` whose parameters and buffers are on the meta device (no memory; ties kept)."""
    memo: dict = {}
    for param in module.parameters():
        memo[id(param)] = torch.nn.Parameter(torch.empty_like(param, device="meta"), requires_grad=param.requires_grad)
    for buf in module.buffers():
        memo[id(buf)] = torch.empty_like(buf, device="meta")
    return copy.deepcopy(module, memo)


def local_parameter_count(model) -> tuple[int, int]:
    """(parameters held by this rank, parameters of the model)."""
    local = total = 0
    for param in model.parameters():
        local += param.to_local().numel() if hasattr(param, "to_local") else param.numel()
        total += param.numel()
    return local, total
