"""Typed run configuration: dataclasses whose defaults are the paper protocol (METHODS.md).

``load_config(path, overrides)`` reads a YAML file, applies ``key.sub=value`` overrides, and builds the
dataclasses. An unknown key or a value of the wrong type or outside its accepted set is a ``ConfigError``
that names the key and what would be accepted. Plug-in sections (``method``) are checked against the
plug-in's own ``Config`` dataclass, so the whole config is validated before any model loads.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

from envs.alfworld.config import AlfworldConfig
from envs.gates.config import GatesConfig
from envs.webshop.config import WebshopConfig


class ConfigError(ValueError):
    """A bad configuration key or value; the message names the key and what is accepted."""


@dataclass
class ModelConfig:
    # "tiny" = the offline Qwen2-architecture model built by harness.models; otherwise a local checkpoint
    # folder (e.g. a downloaded Qwen2.5-7B-Instruct). Hub ids are not fetched at run time.
    source: str = "tiny"
    dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    gradient_checkpointing: bool = True
    # tiny model shape (ignored for real checkpoints)
    tiny_hidden: int = 128
    tiny_layers: int = 2
    tiny_heads: int = 4
    tiny_vocab: int = 2048
    # supervised warm start on expert demonstrations (0 = none; the paper starts from an instruct model)
    warm_start_epochs: int = 0
    warm_start_lr: float = 1e-3
    warm_start_demos: int = 0  # train tasks the expert demonstrates (0 = the whole train panel)
    warm_start_batch: int = 16  # demonstrations per optimizer step
    warm_start_prompt_loss: float = 0.0  # weight of the next-token loss on prompt tokens (teaches copying)
    warm_start_warmup: float = 0.0  # fraction of the optimizer steps with a linear learning-rate warm-up
    warm_start_cosine: bool = False  # decay the learning rate to 0 on a cosine after the warm-up
    warm_start_max_grad_norm: float | None = None  # gradient clipping (None = off)
    cache_dir: str = "results/models"


@dataclass
class BackendConfig:
    name: Literal["hf", "vllm"] = "vllm"
    gpu_memory_utilization: float = 0.6
    tensor_parallel_size: int = 1
    max_model_len: int | None = None  # vllm: longest prompt + response it must hold (None = the model's limit)
    enforce_eager: bool = False  # vllm: skip CUDA-graph capture (faster start, slower decode)


@dataclass
class RolloutConfig:
    tasks_per_step: int = 16
    group_size: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    max_prompt_tokens: int = 2048
    max_response_tokens: int = 512
    history_length: int = 2
    max_env_steps: int | None = None  # None = the benchmark's own limit (ALFWorld 50, WebShop 15)
    think: bool = True  # require <think>...</think> before <action>...</action>
    require_admissible: bool = False  # an action outside the admissible list counts as invalid
    env_workers: int = 4  # worker processes stepping envs; 0 = in this process
    generation_batch: int = 64  # envs generated for in one forward batch


@dataclass
class TrainConfig:
    steps: int = 200
    lr: float = 1e-6
    weight_decay: float = 0.01
    ppo_mini_batch: int = 256  # rows per optimiser step
    ppo_micro_batch: int = 8  # rows per forward (gradient accumulation inside a mini-batch)
    ppo_epochs: int = 1
    clip_ratio: float = 0.2
    clip_ratio_c: float = 3.0  # verl's dual clip for negative advantages
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = (
        "token-mean"
    )
    kl_coef: float = 0.01
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    grad_clip: float = 1.0
    checkpoint_every: int = 10
    device: str = "auto"  # "auto" | "cpu" | "cuda"
    cpu_threads: int = 0  # torch intra-op threads on the CPU (0 = torch's default); 1 suits parallel tiny jobs


@dataclass
class EvalConfig:
    every: int = 5
    temperature: float = 0.4
    split: str = "eval_out"
    panel_size: int | None = None  # None = the benchmark's full panel for the split
    at_start: bool = True


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: str = "sqlite:///results/mlflow.db"
    artifact_root: str = "results/mlartifacts"


@dataclass
class GridConfig:
    """What ``snakemake`` expands into runs (the Snakefile reads this section of the profile)."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    benchmarks: list[str] = field(default_factory=lambda: ["alfworld", "webshop"])
    # a method is a registry name, or a mapping {name: ..., option: value} for a variant (e.g. a λ sweep)
    methods: list[Any] = field(
        default_factory=lambda: ["grpo", "grpo_opsd", "rlsd", "sdar", "stepopsd", "sharpo"]
    )
    # what one train job asks the scheduler for (Snakemake `resources:`/`threads:`; SLURM gets the same)
    gpus: int = 1
    mem_mb: int = 64_000
    threads: int = 8
    runtime_min: int = 24 * 60
    frozen_control: bool = field(default=False, metadata={
        "help": "add one run per benchmark and seed at train.lr = 0, labelled `frozen`: the warm start evaluated on "
                "the same tasks with the same sampling seeds, the control each method's gain is measured against"})


@dataclass
class MethodSection:
    name: str = "grpo"
    options: dict = field(default_factory=dict)


@dataclass
class RunConfig:
    seed: int = 0
    profile: str = "paper"
    benchmark: Literal["alfworld", "webshop", "gates"] = "alfworld"
    method: MethodSection = field(default_factory=MethodSection)
    model: ModelConfig = field(default_factory=ModelConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    alfworld: AlfworldConfig = field(default_factory=AlfworldConfig)
    webshop: WebshopConfig = field(default_factory=WebshopConfig)
    gates: GatesConfig = field(default_factory=GatesConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    output_dir: str = "results/runs"
    run_name: str | None = None  # None = "{method}-{benchmark}-seed{seed}"
    run_label: str | None = field(default=None, metadata={
        "help": "the run folder's method label (None = the method and its non-default options); the grid's "
                "frozen control sets `frozen`"})

    @property
    def benchmark_config(self):
        return getattr(self, self.benchmark)

    @property
    def name(self) -> str:
        return self.run_name or f"{self.method.name}-{self.benchmark}-seed{self.seed}"

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.benchmark / self.method_label / f"seed{self.seed}"

    @property
    def method_label(self) -> str:
        """Method name plus any non-default options, e.g. ``sharpo`` or ``sharpo-lam0.2`` (or ``run_label``)."""
        return self.run_label or method_label(self.method.name, self.method.options)


def method_label(name: str, options: Mapping[str, Any] | None = None) -> str:
    """The run-folder label of a method variant: its name plus ``-<key><value>`` for each non-default option,
    sorted by key (``sharpo-lam0.2``). The one implementation shared by the engine and the Snakefile; the
    registry (and so torch) is only imported when there are options to compare against the defaults."""
    base = name.replace(":", ".")
    if not options:
        return base
    from harness import registry

    method_cls = registry.get(name)
    given = dataclasses.asdict(build_dataclass(method_cls.Config, dict(options), where=f"method ({name})"))
    defaults = dataclasses.asdict(method_cls.Config())
    changed = [f"{k}{given[k]}" for k in sorted(options) if defaults.get(k) != given[k]]
    return "-".join([base] + changed)


# ---------------------------------------------------------------------------------------------------------
def build_dataclass(cls: type, values: Mapping[str, Any], where: str = "config"):
    """Build dataclass ``cls`` from a mapping, checking every key and value; errors name the key."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{where}: expected a mapping of keys, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; accepted keys: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {k: _check_value(hints[k], v, f"{where}.{k}") for k, v in values.items()}
    return cls(**kwargs)


def _check_value(tp, value, key: str):
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return build_dataclass(tp, value or {}, key)
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{key}: {value!r} is not accepted; choose one of {list(typing.get_args(tp))}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _check_value(arg, value, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(f"{key}: {value!r} does not fit {tp}: {'; '.join(errors)}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        (item,) = typing.get_args(tp)[:1] or (Any,)
        items = [_check_value(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if tp is Any or origin is dict or tp is dict:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # YAML 1.1 reads "2e-3" (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if tp in (int, float) and isinstance(value, bool) or not isinstance(value, tp):
        raise ConfigError(f"{key}: expected {tp.__name__}, got {type(value).__name__} {value!r}")
    return value


def parse_overrides(overrides: list[str]) -> dict:
    """``["method.lam=0.2", "seed=1"]`` → nested dict; values are parsed as YAML scalars."""
    nested: dict = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like key.sub=value (e.g. method.lam=0.2)")
        node = nested
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = yaml.safe_load(raw) if raw != "" else ""
    return nested


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _normalise_method(raw: dict) -> dict:
    """``method: sharpo`` or ``method: {name: sharpo, lam: 0.05}`` → MethodSection fields."""
    section = raw.get("method", {})
    if isinstance(section, str):
        section = {"name": section}
    section = dict(section)
    name = section.pop("name", "grpo")
    options = dict(section.pop("options", {}) or {})
    options.update(section)
    raw["method"] = {"name": name, "options": options}
    return raw


def config_from_dict(raw: Mapping[str, Any]) -> RunConfig:
    from harness import registry

    raw = _normalise_method(dict(raw))
    cfg = build_dataclass(RunConfig, raw, where="config")
    # Validate the method's own options now, so a bad key fails before any model loads.
    try:
        method_cls = registry.get(cfg.method.name)
    except registry.UnknownMethodError as err:
        raise ConfigError(f"method.name: {err}") from None
    method_config = build_dataclass(method_cls.Config, cfg.method.options, where=f"method ({cfg.method.name})")
    cfg.method.options = dataclasses.asdict(method_config) if cfg.method.options else {}
    cfg.method.options = {k: v for k, v in cfg.method.options.items() if k in raw["method"]["options"]}
    _align_think(cfg)
    return cfg


def _align_think(cfg: RunConfig) -> None:
    """``rollout.think`` is the one switch: the parser checks it, so every benchmark's prompt must ask for it."""
    for name in ("alfworld", "webshop", "gates"):
        section = getattr(cfg, name)
        if section.think is None:
            section.think = cfg.rollout.think
        elif section.think != cfg.rollout.think:
            raise ConfigError(f"{name}.think={section.think} disagrees with rollout.think={cfg.rollout.think}; "
                              f"set rollout.think only (the prompt follows it)")


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    raw: dict = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise ConfigError(f"config file {str(path)!r} does not exist; profiles live in config/ (cpu, tiny, smoke, paper)")
        raw = yaml.safe_load(path.read_text()) or {}
    # `method=sharpo` names the method; its options come as `method.lam=0.2`, in any order
    overrides = [f"method.name={o.split('=', 1)[1]}" if o.startswith("method=") else o for o in overrides or []]
    extra = parse_overrides(overrides)
    if isinstance(raw.get("method"), str):
        raw["method"] = {"name": raw["method"]}
    return config_from_dict(_with_benchmark_settings(raw, extra))


def _with_benchmark_settings(raw: dict, extra: dict) -> dict:
    """File, then the file's ``per_benchmark: {<benchmark>: {...}}`` settings for the run's benchmark, then
    the overrides: a profile may tune a setting for one benchmark (the tiny WebShop warm start) and the command
    line still has the last word."""
    raw = dict(raw)
    per_benchmark = raw.pop("per_benchmark", None) or {}
    benchmarks = list(typing.get_args(typing.get_type_hints(RunConfig)["benchmark"]))
    if not isinstance(per_benchmark, Mapping) or set(per_benchmark) - set(benchmarks):
        raise ConfigError(f"per_benchmark: expected a mapping from benchmark names {benchmarks} to settings, got "
                          f"{per_benchmark!r}")
    for name, settings in per_benchmark.items():  # every entry, so a typo fails on the other benchmark too
        if not isinstance(settings, Mapping) or "benchmark" in settings:
            raise ConfigError(f"per_benchmark.{name}: expected a mapping of settings (not `benchmark` itself), "
                              f"got {settings!r}")
        build_dataclass(RunConfig, {k: v for k, v in settings.items() if k != "method"}, f"per_benchmark.{name}")
    benchmark = _merge(raw, extra).get("benchmark", RunConfig.benchmark)
    return _merge(_merge(raw, dict(per_benchmark.get(benchmark) or {})), extra)


def to_dict(cfg: RunConfig) -> dict:
    return dataclasses.asdict(cfg)
