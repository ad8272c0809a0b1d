"""Typed run configuration: ``RunConfig`` (its sections, with the paper protocol's defaults, are in
harness/config_sections.py).

``load_config(path, overrides)`` reads a YAML file, applies ``key.sub=value`` overrides, and builds the
dataclasses. An unknown key or a value of the wrong type or outside its accepted set is a ``ConfigError``
that names the key and what would be accepted. Plug-in sections (``method``) are checked against the
plug-in's own ``Config`` dataclass, so the whole config is validated before any model loads.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from envs.base import BENCHMARKS, benchmark_config
from harness.config_sections import (
    BackendConfig,
    EvalConfig,
    GridConfig,
    MethodSection,
    ModelConfig,
    RolloutConfig,
    TrackingConfig,
    TrainConfig,
)
from harness.core.ranges import Checked
from harness.core.typed import ConfigError, build_dataclass
from harness.validation import check_config, merge_mappings, read_profile


@dataclass
class RunConfig(Checked):
    seed: int = field(default=0, metadata={
        "help": "master seed; every other seed is derived from it by hashing", "range": ">= 0"})
    profile: str = field(default="paper", metadata={
        "help": "profile name: labels the run's MLflow experiment and keys the tiny-model cache (the profile's "
                "settings are the YAML file itself)"})
    benchmark: str = field(default="alfworld", metadata={
        "help": "benchmark of the run: a registered one (envs/<name>/: alfworld, webshop, gates); its options are "
                "the `<name>:` section (listed below)"})
    method: MethodSection = field(default_factory=MethodSection, metadata={
        "help": "the credit-assignment method and its options"})
    model: ModelConfig = field(default_factory=ModelConfig, metadata={"help": "the policy the run starts from"})
    backend: BackendConfig = field(default_factory=BackendConfig, metadata={"help": "generation backend"})
    rollout: RolloutConfig = field(default_factory=RolloutConfig, metadata={"help": "multi-turn rollouts"})
    train: TrainConfig = field(default_factory=TrainConfig, metadata={"help": "the PPO update"})
    eval: EvalConfig = field(default_factory=EvalConfig, metadata={"help": "evaluation on the frozen eval panel"})
    tracking: TrackingConfig = field(default_factory=TrackingConfig, metadata={"help": "MLflow"})
    benchmark_options: Any = field(default=None, metadata={
        "help": "the run's benchmark's options, built by its own Config from the `<benchmark>:` section (write "
                "`alfworld:`, `webshop:` ... in a profile, not this key)"})
    grid: GridConfig = field(default_factory=GridConfig, metadata={
        "help": "what snakemake expands into runs (read by the Snakefile, not by a run)"})
    output_dir: str = field(default="results/runs", metadata={
        "help": "runs go to <output_dir>/<benchmark>/<method label>/seed<seed>/"})
    run_name: str | None = field(default=None, metadata={
        "help": 'name of the run in logs and MLflow (null = "{method}-{benchmark}-seed{seed}")'})
    run_label: str | None = field(default=None, metadata={
        "help": "the run folder's method label (null = the method and its non-default options); the grid's "
                "frozen control sets `frozen`"})

    def __post_init__(self):
        super().__post_init__()
        if self.benchmark_options is None:  # RunConfig() in code: the benchmark's defaults (the paper's)
            self.benchmark_options = benchmark_config(self.benchmark)()
        if self.train.strategy == "fsdp" and self.model.dtype == "float16":
            raise ConfigError("model.dtype: float16 is not accepted with train.strategy=fsdp (fp16 needs a loss "
                              "scaler the sharded update does not run); accepted: bfloat16 or float32")

    @property
    def benchmark_config(self):
        return self.benchmark_options

    @property
    def name(self) -> str:
        return self.run_name or f"{self.method.name}-{self.benchmark}-seed{self.seed}"

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.benchmark / self.method_label / f"seed{self.seed}"

    @property
    def method_label(self) -> str:
        """Method name plus any non-default options, e.g. ``sharpo`` or ``sharpo-lam0.2`` (or ``run_label``)."""
        if self.run_label:
            return self.run_label
        return _label(self.method.name, self.method.config, self.method.options) if self.method.options \
            else method_label(self.method.name)


def method_label(name: str, options: Mapping[str, Any] | None = None) -> str:
    """The run-folder label of a method variant: its name plus ``-<key><value>`` for each non-default option,
    sorted by key (``sharpo-lam0.2``). The one rule, shared by the engine and the Snakefile (which labels runs
    before any config loads); the registry (and so torch) is only imported when there are options."""
    if not options:
        return name.replace(":", ".")
    from harness.core import registry

    config = build_dataclass(registry.get(name).Config, dict(options), where=f"method ({name})")
    return _label(name, config, options)


def _label(name: str, config, given: Mapping[str, Any]) -> str:
    defaults = dataclasses.asdict(type(config)())
    values = dataclasses.asdict(config)
    changed = [f"{k}{values[k]}" for k in sorted(given) if defaults.get(k) != values[k]]
    return "-".join([name.replace(":", ".")] + changed)


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
    raw = _normalise_method(dict(raw))
    if "benchmark_options" in raw:
        raise ConfigError("benchmark_options: not a key to set; write the benchmark's own section instead "
                          "(`alfworld: {max_steps: 15}`, `webshop: {...}`)")
    sections = _benchmark_sections(raw)
    cfg = build_dataclass(RunConfig, {**raw, "benchmark_options": sections[raw.get("benchmark", RunConfig.benchmark)]},
                          where="config")
    cfg.method.options = _method_options(cfg.method)
    check_config(cfg)
    return cfg


def _benchmark_sections(raw: dict) -> dict[str, Any]:
    """Pop every ``<benchmark>:`` section out of ``raw`` and build it with that benchmark's own ``Config``, so a
    typo fails whichever benchmark the run is on. Returns one built config per registered benchmark. Only the
    options classes are imported (envs.base.benchmark_config), never an engine: a GPU node without textworld or
    bm25s loads a Gates config."""
    name = raw.get("benchmark", RunConfig.benchmark)
    try:
        benchmark_config(name)  # registers envs/<name>/ if it is not yet known
    except KeyError as err:
        raise ConfigError(f"benchmark: {err.args[0]}") from None
    built = {}
    for bench in BENCHMARKS.available():
        section = raw.pop(bench, None)
        built[bench] = build_dataclass(benchmark_config(bench), section or {}, where=bench)
    return built


def _method_options(section) -> dict:
    """The options as given, each checked now against the method's own ``Config`` (built here, once, and kept
    as ``section.config``), so a bad key fails before any model loads."""
    from harness.core import registry

    try:
        registry.get(section.name)
    except registry.UnknownMethodError as err:
        raise ConfigError(f"method.name: {err}") from None
    built = dataclasses.asdict(section.config)
    return {k: v for k, v in built.items() if k in section.options}


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    raw: dict = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            profiles = ", ".join(sorted(p.stem for p in Path("config").glob("*.yaml"))) or "cpu, tiny, smoke, paper"
            raise ConfigError(f"config file {str(path)!r} does not exist; profiles live in config/ ({profiles})")
        raw = read_profile(path)
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
    benchmarks = BENCHMARKS.available()
    if not isinstance(per_benchmark, Mapping) or set(per_benchmark) - set(benchmarks):
        raise ConfigError(f"per_benchmark: expected a mapping from benchmark names {benchmarks} to settings, got "
                          f"{per_benchmark!r}")
    for name, settings in per_benchmark.items():  # every entry, so a typo fails on the other benchmark too
        if not isinstance(settings, Mapping) or "benchmark" in settings:
            raise ConfigError(f"per_benchmark.{name}: expected a mapping of settings (not `benchmark` itself), "
                              f"got {settings!r}")
        run_keys = {k: v for k, v in settings.items() if k != "method" and k not in benchmarks}
        build_dataclass(RunConfig, run_keys, f"per_benchmark.{name}")
        for bench in set(settings) & set(benchmarks):
            build_dataclass(benchmark_config(bench), settings[bench], f"per_benchmark.{name}.{bench}")
    benchmark = merge_mappings(raw, extra).get("benchmark", RunConfig.benchmark)
    return merge_mappings(merge_mappings(raw, dict(per_benchmark.get(benchmark) or {})), extra)


def to_dict(cfg: RunConfig) -> dict:
    """The config as a profile would write it (the benchmark's options under the benchmark's name), so that
    ``config_from_dict(to_dict(cfg))`` gives ``cfg`` back and the protocol names keys as a user writes them."""
    raw = dataclasses.asdict(cfg)
    raw[cfg.benchmark] = raw.pop("benchmark_options")
    return raw


def seeded_benchmark(cfg: RunConfig, seeds=None):
    """The run's benchmark, built from its config with the env seed its master seed derives (``seeds``: the run's
    :class:`harness.core.seeding.Seeds`, else derived from ``cfg.seed``)."""
    from envs.base import make_benchmark
    from harness.core.seeding import Seeds

    seeds = seeds or Seeds.from_master(cfg.seed)
    return make_benchmark(cfg.benchmark, cfg.benchmark_config, seed=seeds.env, think=cfg.rollout.think)
