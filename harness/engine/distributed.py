"""How a run uses its processes: one (``train.strategy: single``) or one per GPU with FSDP (``fsdp``).

``fsdp`` is launched by torchrun (``python -m torch.distributed.run --standalone --nproc_per_node K -m harness
train ...``; README, "A run on k GPUs"). Every rank builds the same run; then

- the model is sharded with torch's ``fully_shard`` (FSDP2, harness/engine/sharding.py): each decoder layer and
  the root, fp32 master weights, compute in ``model.dtype`` through FSDP's mixed-precision policy. Torch's API,
  not accelerate's FSDP plugin: accelerate applies FSDP to GPU process groups only, and the same code must run
  (and be tested) on the CPU with gloo;
- rollouts are data-parallel: each rank collects whole groups of a contiguous share of the step's tasks (and of
  the eval panel), and all ranks gather the trajectories, so every rank builds the same batch and the same
  advantages;
- scoring and the update split the micro-batches across ranks; the loss weights stay those of one process, so one
  update gives the loss and weights one process gives (tests/test_fsdp.py measures it);
- rank 0 alone writes the run folder and MLflow.

Collectives need every rank to call them the same number of times: a rank short of micro-batches runs a repeat
with weight 0, and generation runs on the full (unsharded) weights, so ranks generate at their own pace.
Nothing here branches on a method.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Callable

import torch

from harness.engine import sharding
from harness.policy.precision import MIXED_PRECISION, Precision  # noqa: F401  (model.dtype → accelerate's name)


def launch_rank() -> int:
    """This process's rank as the launcher set it (0 without torchrun); readable before any process group."""
    return int(os.environ.get("RANK", "0"))


def launch_world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def launch_problem(cfg) -> str | None:
    """Why this process's launch does not fit ``train.strategy`` (:func:`make_accelerator` refuses it, before any
    weight loads), or None."""
    world = launch_world_size()
    if cfg.train.strategy == "single" and world > 1:
        return (f"train.strategy=single trains in one process, but this one was launched as one of WORLD_SIZE={world}"
                f"; pass train.strategy=fsdp, or launch without torchrun")
    if cfg.train.strategy == "fsdp" and "WORLD_SIZE" not in os.environ:
        return ("train.strategy=fsdp runs one process per GPU, started by torchrun: python -m torch.distributed.run "
                "--standalone --nproc_per_node <GPUs> -m harness <command> ... (README: A run on k GPUs), or pass "
                "train.strategy=single")
    return None


def env_workers(cfg) -> int:
    """Env worker processes of this process: ``rollout.env_workers`` is the job's total, split over the ranks of
    an FSDP launch (each rank steps only its share of the tasks), at least one each; 0 stays 0 (in-process envs)."""
    total = cfg.rollout.env_workers
    return total if total == 0 else max(1, total // launch_world_size())


def device_type(cfg) -> str:
    if cfg.train.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return cfg.train.device


def make_accelerator(cfg, precision: Precision):
    """The run's Accelerator, its mixed precision the run's compute dtype (``precision``): one process, or one rank
    of a torchrun launch (gloo on the CPU, nccl on CUDA)."""
    from accelerate.utils import InitProcessGroupKwargs

    from harness.core.typed import ConfigError
    from harness.policy.precision import make_accelerator as precision_accelerator

    problem = launch_problem(cfg)
    if problem:
        raise ConfigError(problem)

    backend = "gloo" if precision.device_type == "cpu" else "nccl"
    handlers = ([InitProcessGroupKwargs(backend=backend, timeout=process_group_timeout(cfg))]
                if launch_world_size() > 1 else [])  # one process has no process group to configure
    return precision_accelerator(precision, kwargs_handlers=handlers)


def close_process_group(ranks_agree: bool) -> None:
    """Leave the launch's process group, if this process joined one. ``ranks_agree``: every rank reached the same
    point (a run that finished or stopped together), so they wait for each other first; a rank that failed leaves at
    once. Why: a rank whose interpreter exits with the group alive can tear down gloo's threads while another rank
    is still in a collective, and dies with ``terminate called without an active exception`` (SIGABRT) although its
    run finished (seen once in CI on 2 loaded cores, tests/test_fsdp.py)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    if ranks_agree:
        dist.barrier()
    dist.destroy_process_group()


def process_group_timeout(cfg) -> timedelta:
    """How long a collective waits for the other ranks (``train.process_group_timeout_min``): one rank's rollouts
    (training or evaluation) may take longer than another's, but a hung rank must not hold every GPU for hours."""
    return timedelta(minutes=cfg.train.process_group_timeout_min)


def prepare(accelerator, cfg, model, make_optimizer: Callable[[Any], torch.optim.Optimizer]):
    """(model, optimizer) ready to train: accelerate's preparation for one process, FSDP shards for ``fsdp``.
    ``make_optimizer(parameters)`` builds the optimizer; under FSDP on the shards (the state is sharded too)."""
    if cfg.train.strategy == "single":
        return accelerator.prepare(model, make_optimizer(model.parameters()))
    model = sharding.shard(model, accelerator.device, getattr(torch, cfg.model.dtype))
    return model, make_optimizer(model.parameters())


def loads_on_meta(cfg) -> bool:
    """Whether this process builds its model on the meta device and receives its weights from rank 0 at sharding
    (:func:`harness.engine.sharding.shard`): every rank but 0 of an FSDP launch."""
    return cfg.train.strategy == "fsdp" and launch_rank() != 0


def is_sharded(model) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch built without distributed support cannot shard
        return False
    return isinstance(model, FSDPModule)


def _world(model) -> tuple[int, int]:
    """(rank, world size) over which ``model``'s work is split: (0, 1) for a model that is not sharded."""
    if not is_sharded(model):
        return 0, 1
    import torch.distributed as dist

    return dist.get_rank(), dist.get_world_size()


# ---------------------------------------------------------------------------------------------- objects
def gather_objects(accelerator, obj) -> list:
    """Every rank's ``obj``, in rank order, on every rank."""
    if accelerator.num_processes == 1:
        return [obj]
    import torch.distributed as dist

    out: list = [None] * accelerator.num_processes
    dist.all_gather_object(out, obj)
    return out


def any_rank(accelerator, flag: bool) -> bool:
    """True on every rank when ``flag`` is True on any rank (how ranks agree to stop at the same step)."""
    if accelerator.num_processes == 1:
        return flag
    return any(gather_objects(accelerator, bool(flag)))


# ---------------------------------------------------------------------------------------------- rollouts
def task_share(count: int, rank: int, world: int) -> slice:
    """The contiguous, balanced share of ``count`` tasks that ``rank`` rolls out (sizes differ by one at most)."""
    return slice(count * rank // world, count * (rank + 1) // world)


def shard_seed(seed: int, first_task: int) -> int:
    """The sampling seed of the share that starts at task ``first_task``: the step's own seed for the share that
    starts at 0, so one process samples exactly as before. Shares elsewhere draw from their own stream (sampling
    draws depend on a row's place in the generation batch, so k ranks cannot replay one process's draws; they
    draw from the same distribution, reproducibly for a given k)."""
    from harness.core.seeding import step_seed

    return seed if first_task == 0 else step_seed(seed, first_task, "shard")


def collect(accelerator, backend, tasks: list, group_size: int, seed: int, run: Callable[[list, int], list]) -> list:
    """``run(tasks, seed)`` (a rollout collection with ``backend``) over this rank's share of ``tasks``; returns
    every rank's trajectories, groups numbered as one process numbers them (group g = ``tasks[g]``)."""
    world = accelerator.num_processes
    share = task_share(len(tasks), accelerator.process_index, world)
    with full_weights(_generating_module(backend)):
        local = run(tasks[share], shard_seed(seed, share.start))
    for traj in local:
        traj.group_id += share.start
        traj.traj_id += share.start * group_size
    return [traj for part in gather_objects(accelerator, local) for traj in part]


def _generating_module(backend):
    """The module ``backend`` generates with, if it runs on the trained module itself (hf); None for an engine
    with its own weights (vLLM), which needs no full weights here: they reach it through :func:`sync_weights`."""
    return getattr(backend, "model", None)


def _fsdp_modules(model) -> list:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextmanager
def full_weights(model):
    """Inside, a sharded model holds its full weights (one collective on entry), so its forward passes are
    local and ranks may run different numbers of them (generation); on exit the shards are all it keeps."""
    if model is None or not is_sharded(model):
        yield
        return
    modules = _fsdp_modules(model)
    for module in modules:
        if module is not model:  # the root keeps its own setting (FSDP leaves the root unsharded after forward)
            module.set_reshard_after_forward(False, recurse=False)
        module.unshard()
    try:
        yield
    finally:
        for module in modules:
            module.reshard()
            if module is not model:
                module.set_reshard_after_forward(True, recurse=False)


# ---------------------------------------------------------------------------------------------- micro-batches
def micro_batch_share(model, count: int) -> list[tuple[int, bool]]:
    """(micro-batch index, counts) pairs this rank runs, of ``count`` micro-batches: all of them for a model that
    is not sharded, else a round-robin share, padded with repeats of one of its own (``counts`` False: weight 0)
    so that every rank makes as many forward and backward passes as the others."""
    rank, world = _world(model)
    mine = list(range(rank, count, world))
    rounds = -(-count // world)
    return [(j, True) for j in mine] + [(mine[0] if mine else 0, False)] * (rounds - len(mine))


def gradient_scale(model) -> float:
    """FSDP averages gradients over ranks; the update wants their sum (each rank's loss already carries its rows'
    share of the mini-batch), so the loss is multiplied by the world size."""
    return float(_world(model)[1])


def map_micro_batches(model, rows: int, micro_batch: int, run: Callable[[slice], torch.Tensor]) -> torch.Tensor:
    """``run(rows slice)`` over the micro-batches of ``rows`` rows, concatenated in row order: one call on all rows
    for a model that is not sharded; under FSDP each rank runs its share and the results are gathered."""
    if not is_sharded(model):
        return run(slice(0, rows))
    import torch.distributed as dist

    count = -(-rows // micro_batch)
    part = lambda j: slice(j * micro_batch, (j + 1) * micro_batch)  # noqa: E731
    local = {}
    for j, counts in micro_batch_share(model, count):
        out = run(part(j))  # a repeat (counts False) only keeps the forward passes of the ranks in step
        if counts:
            local[j] = out.cpu()
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, local)
    merged = {j: t for chunk in gathered for j, t in chunk.items()}
    return torch.cat([merged[j] for j in range(count)])


def clip_grad_norm_(accelerator, model, max_norm: float) -> torch.Tensor:
    """The total gradient norm before clipping (a plain tensor, the same on every rank)."""
    if not is_sharded(model):
        return accelerator.clip_grad_norm_(model.parameters(), max_norm)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


def merge_sums(model, sums: dict[str, float], counts: dict[str, int]) -> tuple[dict, dict]:
    """Per-rank metric sums and counts → those of the whole update (every rank gets the same)."""
    if _world(model)[1] == 1:
        return sums, counts
    import torch.distributed as dist

    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (dict(sums), dict(counts)))
    total_sums: dict[str, float] = {}
    total_counts: dict[str, int] = {}
    for part_sums, part_counts in gathered:
        for key, value in part_sums.items():
            total_sums[key] = total_sums.get(key, 0.0) + value
            total_counts[key] = total_counts.get(key, 0) + part_counts[key]
    return total_sums, total_counts


# ---------------------------------------------------------------------------------------------- state
def full_state(accelerator, model, optimizer) -> tuple[dict, dict] | None:
    """A sharded model's full (unsharded) model and optimizer state dicts, on rank 0 (None on the other ranks; all
    must call it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)  # gathered to rank 0's CPU memory
    model_state = get_model_state_dict(model, options=options)
    optimizer_state = get_optimizer_state_dict(model, optimizer, options=options)
    return (model_state, optimizer_state) if accelerator.is_main_process else None


def load_full_state(model, optimizer, model_state: dict, optimizer_state: dict) -> None:
    """Load what :func:`full_state` saved into a sharded model; each rank keeps its shard of the full tensors."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True)  # every rank read the (memory-mapped) checkpoint itself
    set_model_state_dict(model, model_state, options=options)
    set_optimizer_state_dict(model, optimizer, optimizer_state, options=options)


def sync_weights(backend, model) -> None:
    """``backend.sync_weights(model)`` on every rank: an engine with its own weights streams a sharded model's
    full tensors one at a time (harness/policy/engine_weights.py, a collective per tensor); a backend that
    generates on the module itself (hf) has nothing to do."""
    backend.sync_weights(model)


# ---------------------------------------------------------------------------------------------- logging
class NullStepLog:
    """The run folder's logs on a rank other than 0: nothing is written."""

    def rows(self) -> list[dict]:
        return []

    def append(self, rows) -> None:
        pass

    def truncate_after(self, step: int) -> None:
        pass


def quiet(*args, **kwargs) -> None:
    """The log of ranks other than 0 (rank 0 speaks for the run)."""
