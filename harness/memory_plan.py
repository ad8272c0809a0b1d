"""The memory plan: what one GPU of a run holds, phase by phase, worked out before any weight is loaded.

``python -m harness plan --config config/paper.yaml [overrides] [--gpu-gib 80]`` prints it; ``train`` checks the
same plan on a CUDA device at start-up (:func:`harness.preflight.check_start_up`) and refuses a plan that does not
fit. The model is built on the meta device from ``model.source``'s ``config.json`` (no weights are read), or, where
that folder is not on this machine, from the shipped ``harness/model_configs/<folder name>.json`` (Qwen2.5-7B- and
1.5B-Instruct; said so in the plan's first line). LoRA adapters are attached with peft on the meta device, so the
trained-parameter count is peft's own.

The scheme the plan assumes (P parameters, T of them trained, k = grid.gpus under ``train.strategy=fsdp``, else 1;
c = bytes of ``model.dtype``, the compute dtype):

* Trained weights are fp32 master weights (4 B), their gradients fp32 (4 B), AdamW's ``exp_avg`` + ``exp_avg_sq``
  fp32 (8 B); all three sharded 1/k under FSDP. LoRA: the frozen base is held in the compute dtype (c B: a weight
  that never changes needs no fp32 master), the adapter in fp32.
* ``optimizer.step()`` with torch's foreach AdamW allocates about one fp32 copy of the (local) trained parameters
  (``_foreach_sqrt(exp_avg_sq)`` and the terms built from it).
* Compute copies: single GPU, autocast caches the c-byte cast of every fp32 weight a forward touches until the
  autocast region ends (full fine-tune: c·P); FSDP gathers the unit being run plus the one prefetched (the root
  unit: embeddings, final norm, lm_head; and two decoder layers) in the compute dtype, and for a full fine-tune
  holds as much again of unsharded gradients before the reduce-scatter.
* Reference model (``kl_coef > 0``, :mod:`harness.engine.reference`): LoRA = the base with the adapter disabled (no
  memory); FSDP = sharded like the policy, fp32, 4·P/k; one GPU with ``train.reference_offload`` = an fp32 copy in
  CPU memory whose modules accelerate's ``cpu_offload`` hooks bring to the GPU one at a time while it scores (the
  largest module, the embedding or lm_head, in fp32 plus its cast); one GPU otherwise = an fp32 copy, 4·P.
* Activations of one ``ppo_micro_batch`` of b rows × s = ``max_prompt_tokens + max_response_tokens`` tokens (the
  longest a row can be; :mod:`harness.policy.logprobs` keeps logits for the r = ``max_response_tokens`` \
response positions
  only): with gradient checkpointing each layer's input (L·b·s·h·c) plus one layer's saved tensors and their
  gradients being recomputed; without it every layer's saved tensors. Logits: b·r·V·(c + 16) bytes
  (:data:`harness.memory_rows.LOGITS_BACKWARD_EXTRA_BYTES`).
* FSDP x vLLM layout rows (:mod:`harness.memory_rows`): PyTorch's cached-but-free blocks at the engine's wake,
  the full model FSDP + ``hf`` generation holds, the root unit's fp32 reduce-scatter buffer.
  The scoring forward of a method with a teacher holds rows of s + ``rollout.teacher_context_tokens`` tokens
  (the teacher's privileged prompts).
* vLLM: ``backend.gpu_memory_utilization`` × the GPU's memory, held during generation only. The backend sleeps
  the engine after each generation (:mod:`harness.policy.backends.vllm`, ``backend.sleep_level``: weights discarded
  or moved to CPU memory, KV cache freed), so the update phases do not hold it; what a sleeping engine keeps (its
  CUDA graphs, the CUDA context) is left to the reserve row. The ``hf`` backend instead holds a KV cache for its
  generation batch and one layer's prefill activations, on top of the policy it runs.
* Syncing the weights into the engine (its weights awake, its KV cache not) holds less than generation does, and
  is not a phase of its own here.
* Gradients are released after each update (:func:`harness.engine.trainer.rl_step` sets them to None), so generation
  does not hold them.
* A reserve of ``train.memory_reserve_gib`` (default 6 GiB) in every phase: the CUDA context, the CUDA graphs a
  sleeping vLLM engine keeps, NCCL buffers, allocator fragmentation; 6-8 GiB is typical of a colocated FSDP +
  vLLM run (it was 5% of the GPU, 4 GiB of an 80 GB one, below that). An allowance, not a measurement;
  ``scripts/gpu_check.sh`` prints measured peaks next to this plan's.

The peak is the largest phase; the plan fits when it is at most the GPU's memory.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from harness.memory_rows import GIB, LOGITS_BACKWARD_EXTRA_BYTES, MASTER_BYTES, PHASES, Row, Shape, layout_rows

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
SHIPPED_CONFIGS = Path(__file__).parent / "model_configs"  # one config.json per model a shipped profile names
SHIPPED_CONFIG = SHIPPED_CONFIGS / "Qwen2.5-7B-Instruct.json"  # the paper profile's (scripts/gpu_check.py)
EXIT_DOES_NOT_FIT = 3


@dataclass
class Plan:
    title: str
    rows: list[Row]
    gpu_gib: float

    def phase_bytes(self, phase: str, reserve: bool = True) -> int:
        return sum(r.bytes for r in self.rows if phase in r.phases and (reserve or not r.allowance))

    def peak_gib(self, reserve: bool = True) -> float:
        return max(self.phase_bytes(p, reserve) for p in PHASES) / GIB

    @property
    def peak_phase(self) -> str:
        return max(PHASES, key=self.phase_bytes)

    @property
    def fits(self) -> bool:
        return self.peak_gib() <= self.gpu_gib

    def peak_line(self) -> str:
        verdict = "fits" if self.fits else "does not fit"
        return f"peak {self.peak_gib():.1f} GiB per GPU of {self.gpu_gib:.1f} GiB: {verdict}"

    def table(self) -> str:
        keys = list(PHASES)
        lines = [self.title, "phases: " + ", ".join(f"{i + 1} = {PHASES[k]}" for i, k in enumerate(keys)), "",
                 f"| held per GPU | GiB | {' | '.join(str(i + 1) for i in range(len(keys)))} |",
                 "|---|---:|" + "---|" * len(keys)]
        for row in self.rows:
            marks = " | ".join("x" if k in row.phases else "" for k in keys)
            lines.append(f"| {row.label} | {row.bytes / GIB:.2f} | {marks} |")
        totals = " | ".join(f"{self.phase_bytes(k) / GIB:.1f}" for k in keys)
        lines.append(f"| **total per phase** | | {totals} |")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# the model, on the meta device
def model_config(cfg):
    """``(transformers config, where it came from)`` for ``cfg.model``; the shipped config of the same name where the
    folder is not here."""
    from transformers import AutoConfig

    if cfg.model.source == "tiny":
        from harness.policy.tiny_model import tiny_config

        return tiny_config(cfg.model, vocab_size=cfg.model.tiny_vocab), (
            f"the tiny model's shape (model.tiny_*; vocabulary at most model.tiny_vocab={cfg.model.tiny_vocab})")
    path = Path(cfg.model.source) / "config.json"
    source = str(path)
    if not path.is_file():
        path = shipped_config(cfg.model.source)
        source = f"{path.relative_to(Path(__file__).parent.parent)}, the shipped copy: {source} is not on this machine"
    raw = json.loads(path.read_text())
    if "model_type" not in raw:
        from harness.core.typed import ConfigError

        raise ConfigError(f"{path} has no model_type; model.source must be a Hugging Face checkpoint folder")
    return AutoConfig.for_model(raw.pop("model_type"), **raw), source


def shipped_config(model_source: str) -> Path:
    """The shipped config.json named like ``model_source``'s folder; a ConfigError naming the shipped ones, else (a
    plan of another model's shape would be a wrong plan that says it fits)."""
    path = SHIPPED_CONFIGS / f"{Path(model_source).name}.json"
    if path.is_file():
        return path
    from harness.core.typed import ConfigError

    shipped = sorted(p.stem for p in SHIPPED_CONFIGS.glob("*.json"))
    raise ConfigError(f"model.source={model_source!r} has no config.json on this machine and no shipped copy is named "
                      f"{path.name} (shipped: {shipped}): download the model folder, or put its config.json there")


def model_shape(cfg) -> Shape:
    config, source = model_config(cfg)
    m = cfg.model
    return _count(config.to_json_string(), source, m.lora_rank, m.lora_alpha, tuple(m.lora_target_modules))


@lru_cache(maxsize=8)
def _count(config_json: str, source: str, lora_rank: int, lora_alpha: float, targets: tuple[str, ...]) -> Shape:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = json.loads(config_json)
    config = AutoConfig.for_model(raw.pop("model_type"), **raw)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
        layers = next(mod for mod in model.modules()
                      if isinstance(mod, torch.nn.ModuleList) and len(mod) == config.num_hidden_layers)
        layer_params = sum(p.numel() for p in layers[0].parameters())
        params = sum(p.numel() for p in model.parameters())
        largest = max(sum(p.numel() for p in mod.parameters(recurse=False)) for mod in model.modules())
        trained = params
        if lora_rank > 0:
            model = _with_lora(model, lora_rank, lora_alpha, list(targets))
            params = sum(p.numel() for p in model.parameters())
            trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
            layer_params = sum(p.numel() for p in layers[0].parameters())
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return Shape(arch=type(model.get_base_model() if lora_rank > 0 else model).__name__, source=source,
                 params=params, trained=trained, layers=config.num_hidden_layers, layer_params=layer_params,
                 hidden=config.hidden_size, intermediate=config.intermediate_size, kv_dim=kv_heads * head_dim,
                 vocab=config.vocab_size, largest_module_params=largest)


def _with_lora(model, rank: int, alpha: float, targets: list[str]):
    import warnings

    from peft import LoraConfig, get_peft_model

    try:
        with warnings.catch_warnings():  # peft calls a transformers property deprecated in 5.x
            warnings.simplefilter("ignore", FutureWarning)
            return get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets))
    except ValueError as err:
        from harness.core.typed import ConfigError

        raise ConfigError(f"model.lora_target_modules={targets}: {err}") from None


# ---------------------------------------------------------------------------------------------------------
# the rows
def make_plan(cfg, gpu_gib: float) -> Plan:
    """The plan of ``cfg`` (a :class:`harness.config.RunConfig`) on GPUs of ``gpu_gib`` GiB each."""
    shape = model_shape(cfg)
    k = shards(cfg)
    c = DTYPE_BYTES[cfg.model.dtype]
    lora = cfg.model.lora_rank > 0
    rows = _state_rows(cfg, shape, k, c, lora) + [_reference_row(cfg, shape, k, c, lora)]
    rows += _activation_rows(cfg, shape, c) + [_generation_row(cfg, shape, c, gpu_gib)]
    rows += _layout_rows(cfg, shape, rows, k, c)
    rows.append(Row("reserve: CUDA context and graphs, NCCL, fragmentation (train.memory_reserve_gib allowance)",
                    int(cfg.train.memory_reserve_gib * GIB), tuple(PHASES), allowance=True))
    what = (f"LoRA rank {cfg.model.lora_rank} ({shape.trained:,} trained)" if lora else
            f"full fine-tune ({shape.trained:,} trained)")
    where = f"FSDP over {k} GPUs" if cfg.train.strategy == "fsdp" else "one GPU"
    title = (f"memory plan: {shape.arch}, {shape.params:,} parameters on the meta device, from {shape.source}\n"
             f"{what}, {where}; fp32 master weights, {cfg.model.dtype} compute; micro-batch "
             f"{cfg.train.ppo_micro_batch} × {_seq(cfg)} tokens; backend {cfg.backend.name}")
    return Plan(title=title, rows=rows, gpu_gib=gpu_gib)


def _layout_rows(cfg, shape: Shape, rows: list[Row], k: int, c: int) -> list[Row]:

    return layout_rows(cfg, shape, rows, k, c)


def shards(cfg) -> int:
    return max(1, cfg.grid.gpus) if cfg.train.strategy == "fsdp" else 1


def _seq(cfg) -> int:
    return cfg.rollout.max_prompt_tokens + cfg.rollout.max_response_tokens


def _state_rows(cfg, shape: Shape, k: int, c: int, lora: bool) -> list[Row]:
    trained, frozen = shape.trained, shape.params - shape.trained
    shard = f", 1/{k} shard" if k > 1 else ""
    weights = (Row(f"policy weights: frozen base in {cfg.model.dtype} + fp32 adapter{shard}",
                   (c * frozen + MASTER_BYTES * trained) // k, tuple(PHASES)) if lora else
               Row(f"policy weights, fp32 master{shard}", MASTER_BYTES * trained // k, tuple(PHASES)))
    rows = [weights,
            Row(f"gradients, fp32{shard}", MASTER_BYTES * trained // k, ("bwd", "step")),
            Row(f"AdamW exp_avg + exp_avg_sq, fp32{shard}", 2 * MASTER_BYTES * trained // k, tuple(PHASES)),
            Row("optimizer-step temporaries (foreach AdamW, ≈ one fp32 copy)", MASTER_BYTES * trained // k,
                ("step",))]
    compute_phases = ("score", "bwd", "gen") if cfg.backend.name == "hf" else ("score", "bwd")
    if cfg.train.strategy == "fsdp":
        unit = c * (shape.root_params + 2 * shape.layer_params)
        rows.append(Row(f"FSDP unsharded units in {cfg.model.dtype} (root + 2 layers)"
                        + ("" if lora else " + their unsharded gradients"), unit * (1 if lora else 2), compute_phases))
    elif c < MASTER_BYTES:
        rows.append(Row(f"{cfg.model.dtype} copies of the fp32 weights (autocast's cast cache)", c * trained,
                        compute_phases))
    return rows


def _reference_row(cfg, shape: Shape, k: int, c: int, lora: bool) -> Row:
    if cfg.train.kl_coef == 0:
        return Row("KL reference: none (train.kl_coef = 0)", 0, tuple(PHASES))
    if lora:
        return Row("KL reference: the base with the adapter disabled (no copy)", 0, tuple(PHASES))
    if cfg.train.strategy == "fsdp":
        return Row(f"KL reference, fp32, 1/{k} shard", MASTER_BYTES * shape.params // k, tuple(PHASES))
    if cfg.train.reference_offload:
        return Row("KL reference: fp32 in CPU memory, streamed a module at a time while scoring",
                   (MASTER_BYTES + c) * shape.largest_module_params, ("score",))
    return Row("KL reference: an fp32 copy on the GPU", MASTER_BYTES * shape.params, tuple(PHASES))


def _layer_bytes_per_token(shape: Shape, c: int) -> int:
    """Tensors one decoder layer saves for its backward, per token: the fp32 inputs of its two RMSNorms, the
    normalised inputs, q/k/v, the attention output, and the MLP's gate, up, act(gate) and product."""
    h, i, kv = shape.hidden, shape.intermediate, shape.kv_dim
    return 2 * 4 * h + c * (5 * h + 4 * kv + 4 * i)


def _activation_rows(cfg, shape: Shape, c: int) -> list[Row]:
    b, s, r = cfg.train.ppo_micro_batch, _seq(cfg), cfg.rollout.max_response_tokens
    per_layer = b * s * _layer_bytes_per_token(shape, c)
    logits = b * r * shape.vocab
    if cfg.model.gradient_checkpointing:
        layers = shape.layers * b * s * shape.hidden * c + 2 * per_layer
        how = "gradient checkpointing: layer inputs + one layer recomputed"
    else:
        layers = shape.layers * per_layer + per_layer
        how = "no gradient checkpointing: every layer's saved tensors"
    teacher = _teacher_room(cfg)  # the teacher pass scores prompts this much longer (harness/engine/teacher.py)
    scoring = 2 * b * (s + teacher) * (shape.hidden + shape.intermediate) * c + logits * (c + 8)
    longest = f", teacher prompts {s + teacher} tokens" if teacher else ""
    return [Row(f"activations, micro-batch {b} × {s} tokens ({how})", layers, ("bwd",)),
            Row(f"logits of {r} response tokens and their gradient", logits * (c + _logits_extra()), ("bwd",)),
            Row(f"scoring forward (no gradient): one layer + logits{longest}", scoring, ("score",))]


def _teacher_room(cfg) -> int:
    """rollout.teacher_context_tokens when the run's method scores a teacher context, else 0."""
    from harness.core import registry

    return cfg.rollout.teacher_context_tokens if registry.get(cfg.method.name).teacher is not None else 0


def _logits_extra() -> int:

    return LOGITS_BACKWARD_EXTRA_BYTES


def _generation_row(cfg, shape: Shape, c: int, gpu_gib: float) -> Row:
    if cfg.backend.name == "vllm":
        u = cfg.backend.gpu_memory_utilization
        return Row(f"vLLM at gpu_memory_utilization {u} (asleep outside generation)", int(u * gpu_gib * GIB), ("gen",))
    from harness.policy.backends.hf import HFBackend

    batch = inspect.signature(HFBackend.__init__).parameters["batch_size"].default
    rows = min(cfg.rollout.generation_batch, cfg.rollout.tasks_per_step * cfg.rollout.group_size, batch)
    kv_cache = rows * _seq(cfg) * shape.layers * 2 * shape.kv_dim * c
    prefill = rows * cfg.rollout.max_prompt_tokens * (3 * shape.intermediate + 4 * shape.hidden) * c
    return Row(f"hf generation: KV cache of {rows} rows + one layer's prefill", kv_cache + prefill, ("gen",))


# ---------------------------------------------------------------------------------------------------------
# what to change, the device, the start-up check
def suggestions(cfg, gpu_gib: float) -> list[str]:
    """Override sets (as ``key=value`` text) that make a plan which does not fit fit, each with its peak."""
    m, t, g = cfg.model, cfg.train, cfg.grid
    candidates = []
    if t.strategy != "fsdp" or g.gpus < 8:
        candidates += [{"train.strategy": "fsdp", "grid.gpus": n} for n in (2, 4, 8) if n > g.gpus]
    if not m.gradient_checkpointing:
        candidates.append({"model.gradient_checkpointing": True})
    if m.lora_rank == 0:
        candidates.append({"model.lora_rank": 64})
    if t.ppo_micro_batch > 1:
        candidates.append({"train.ppo_micro_batch": max(1, t.ppo_micro_batch // 2)})
    if cfg.backend.name == "vllm" and cfg.backend.gpu_memory_utilization > 0.4:
        candidates.append({"backend.gpu_memory_utilization": 0.4})
    if t.kl_coef > 0 and m.lora_rank == 0 and t.strategy == "single" and not t.reference_offload:
        candidates.append({"train.reference_offload": True})
    found = []
    for change in candidates:
        plan = make_plan(_replace(cfg, change), gpu_gib)
        if plan.fits:
            found.append(" ".join(f"{k}={v}" for k, v in change.items()) + f" ({plan.peak_gib():.1f} GiB)")
    return found


def _replace(cfg, change: dict):
    sections: dict[str, dict] = {}
    for key, value in change.items():
        section, name = key.split(".")
        sections.setdefault(section, {})[name] = value
    return dataclasses.replace(cfg, **{s: dataclasses.replace(getattr(cfg, s), **v) for s, v in sections.items()})


def report(cfg, gpu_gib: float) -> tuple[str, bool]:
    """The plan as printed by ``python -m harness plan``: table, then the peak line (with what to change)."""
    plan = make_plan(cfg, gpu_gib)
    last = plan.peak_line()
    if not plan.fits:
        found = suggestions(cfg, gpu_gib)
        last += ("; change " + " or ".join(found)) if found else (
            "; no single change found: use a GPU with more memory, LoRA with FSDP, or shorter sequences")
    return plan.table() + "\n\n" + last, plan.fits


def device_gib() -> float | None:
    """Memory of CUDA device 0 in GiB, or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / GIB


def uses_cuda(cfg) -> bool:
    from harness.engine.distributed import device_type

    return device_type(cfg) == "cuda"


def start_up_problem(cfg) -> str | None:
    """The start-up check of ``train`` on CUDA: None when the plan fits this device, else the plan and its verdict."""
    if not uses_cuda(cfg):
        return None
    gib = device_gib()
    if gib is None:
        return None  # no CUDA device: harness.preflight reports that itself
    text, fits = report(cfg, gib)
    return None if fits else "the memory plan does not fit this GPU (python -m harness plan):\n" + text
