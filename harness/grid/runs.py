"""The grid of a profile: the (benchmark, method variant, seed) runs that ``snakemake`` expands it into.

One reading of ``config/<profile>.yaml``'s ``grid:`` section, shared by the Snakefile (which turns each run into a
train job) and by the tables (which mark the runs of the grid that have not finished as missing cells). The run
folder and the method label come from ``harness.config`` — the same code the engine uses — so the path the
workflow waits for is the path the engine writes.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.grid.compute_match import COMPUTE_MATCHED
from harness.grid.compute_match import DISPLAY as COMPUTE_MATCHED_DISPLAY
from harness.grid.compute_match import plan as plan_compute_matched

FROZEN = "frozen"  # label of the lr-0 control runs (grid.frozen_control)


FROZEN_METHOD = "grpo"  # the frozen control is this method at lr 0


def frozen_overrides(label: str = FROZEN) -> tuple[str, ...]:
    """The frozen control's overrides of ``FROZEN_METHOD``: lr 0 (no update runs: train.updates_weights), under its
    own label. The grid and perf/learning.py both build it from here."""
    return ("train.lr=0.0", f"run_label={label}")
# The grid's control arms, which are not methods: (display name, table order); methods declare theirs on the class
CONTROL_ARMS = {FROZEN: ("Frozen (lr 0)", 10**5), COMPUTE_MATCHED: (COMPUTE_MATCHED_DISPLAY, 15)}


@dataclass(frozen=True)
class RunSpec:
    """One train job of the grid."""

    benchmark: str
    method_name: str  # registry name (or dotted path)
    options: tuple[tuple[str, Any], ...]  # the variant's non-name options, sorted by key
    label: str  # run-folder label: name plus non-default options (harness.config.method_label)
    seed: int
    extra: tuple[str, ...] = ()  # further overrides (the frozen control's lr and label)
    setting: tuple[tuple[str, Any], ...] = ()  # the grid setting it runs under (grid.settings), sorted by key

    @property
    def key(self) -> str:
        """The run folder relative to the output root: ``<benchmark>/<label>/seed<seed>``."""
        return f"{self.benchmark}/{self.label}/seed{self.seed}"

    def overrides(self) -> list[str]:
        """Command-line overrides for ``python -m harness train``, each quoted for the shell."""
        return [shlex.quote(item) for item in self.override_items()]

    def override_items(self) -> list[str]:
        """The same overrides unquoted, as ``harness.config.load_config`` takes them."""
        items = [f"benchmark={self.benchmark}", f"method={self.method_name}"]
        items += [f"method.{key}={_scalar(value)}" for key, value in self.options]
        items.append(f"seed={self.seed}")
        items += [f"{key}={_scalar(value)}" for key, value in self.setting]
        items += list(self.extra)
        return items


@dataclass(frozen=True)
class Grid:
    profile: str
    profile_path: Path
    output_dir: str
    runs: tuple[RunSpec, ...]
    resources: dict  # gpus, mem_mb, threads, runtime_min of one train job
    settings: tuple[tuple[tuple[str, Any], ...], ...] = ()  # grid.settings, each sorted by key; () = none swept
    compute_basis: str | None = None  # grid.compute_basis: the token basis the compute-matched arm is planned from

    @property
    def method_labels(self) -> list[str]:
        return list(dict.fromkeys(run.label for run in self.runs))

    def run(self, key: str) -> RunSpec:
        return self._by_key()[key]

    def _by_key(self) -> dict[str, RunSpec]:
        return {run.key: run for run in self.runs}


def _scalar(value: Any) -> str:
    # JSON scalars are valid YAML scalars, which is how harness.config parses override values.
    return value if isinstance(value, str) else json.dumps(value)


def _split_method(entry: Any, where: str) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """``"sharpo"`` or ``{name: sharpo, lam: 0.2}`` → (name, sorted options)."""
    if isinstance(entry, str):
        return entry, ()
    if isinstance(entry, dict) and isinstance(entry.get("name"), str):
        options = {k: v for k, v in entry.items() if k != "name"}
        options.update(options.pop("options", None) or {})
        return entry["name"], tuple(sorted(options.items()))
    raise ValueError(
        f"{where}: method entry {entry!r} must be a registry name (e.g. 'sharpo') "
        "or a mapping with a name (e.g. {name: sharpo, lam: 0.2})"
    )


def profile_path(profile: str, config_dir: str | Path = "config") -> Path:
    """``tiny`` → ``config/tiny.yaml``; a path to a YAML file is taken as it is."""
    path = Path(profile)
    if path.suffix in (".yaml", ".yml"):
        return path
    return Path(config_dir) / f"{profile}.yaml"


def load_grid(profile: str, config_dir: str | Path = "config") -> Grid:
    """Read a profile's grid, check it, and expand it into runs (benchmarks × methods × seeds)."""
    from harness.config import RunConfig, method_label
    from harness.config_sections import GridConfig
    from harness.core.typed import ConfigError, build_dataclass
    from harness.validation import read_profile

    path = profile_path(profile, config_dir)
    if not path.exists():
        choices = sorted(p.stem for p in Path(config_dir).glob("*.yaml"))
        raise ConfigError(f"profile {profile!r}: {path} does not exist; profiles in {config_dir}/: {choices}")
    raw = read_profile(path)
    try:
        grid = build_dataclass(GridConfig, raw.get("grid") or {}, where="grid")
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    runs = []
    for setting in _settings(grid.settings, path):
        arms = []
        for index, entry in enumerate(grid.methods):
            name, options = _split_method(entry, f"{path}: grid.methods[{index}]")
            label = setting_label(method_label(name, dict(options)), setting)
            extra = (f"run_label={label}",) if setting else ()
            arms += [RunSpec(b, name, options, label, int(s), extra, setting)
                     for b in grid.benchmarks for s in grid.seeds]
        if grid.compute_matched:
            arms += _compute_matched_runs(path, grid, arms, setting)
        if grid.frozen_control:
            label = setting_label(FROZEN, setting)
            arms += [RunSpec(b, FROZEN_METHOD, (), label, int(s), frozen_overrides(label), setting)
                     for b in grid.benchmarks for s in grid.seeds]
        runs += arms
    _check_unique(runs, path)
    resources = {k: getattr(grid, k) for k in ("gpus", "mem_mb", "threads", "runtime_min")}
    resources["strategy"] = _strategy(raw, path)  # how the job is launched: one process, or torchrun over its GPUs
    output_dir = raw.get("output_dir") or RunConfig().output_dir
    settings = tuple(setting for setting in _settings(grid.settings, path) if setting)
    return Grid(path.stem, path, str(output_dir), tuple(runs), resources, settings, grid.compute_basis)


def setting_label(label: str, setting: tuple[tuple[str, Any], ...]) -> str:
    """``grpo`` under {gates.horizon: 8} → ``grpo@horizon8``: a run identity of its own for every setting."""
    if not setting:
        return label
    return label + "@" + "-".join(f"{key.rsplit('.', 1)[-1]}{_scalar(value)}" for key, value in setting)


def split_setting_label(label: str) -> tuple[str, str]:
    """``grpo@horizon8`` → (``grpo``, ``horizon8``); a label without a setting → (label, "")."""
    base, _, tag = label.partition("@")
    return base, tag


# keys a setting may not set: the grid itself decides them for every run
_GRID_KEYS = ("seed", "benchmark", "method", "run_label", "run_name", "output_dir", "profile", "grid")


def _settings(entries: list, path: Path) -> list[tuple[tuple[str, Any], ...]]:
    """``grid.settings`` checked: each a non-empty mapping of dotted config keys; none → one empty setting."""
    from harness.core.typed import ConfigError

    out = []
    for index, entry in enumerate(entries):
        where = f"{path}: grid.settings[{index}]"
        if not isinstance(entry, dict) or not entry:
            raise ConfigError(f"{where}: expected a mapping of config keys to values, e.g. {{gates.horizon: 8}}; "
                              f"got {entry!r}")
        taken = sorted(k for k in entry if str(k).split(".", 1)[0] in _GRID_KEYS)
        if taken:
            raise ConfigError(f"{where}: {taken} are set by the grid for every run (seeds, benchmarks, methods); "
                              f"a setting may set any other config key, e.g. gates.horizon")
        out.append(tuple(sorted((str(k), v) for k, v in entry.items())))
    return out or [()]


def _compute_matched_runs(path: Path, grid, runs: list[RunSpec], setting=()) -> list[RunSpec]:
    """GRPO at the counted compute of the grid's costliest method, per benchmark and setting
    (harness/grid/compute_match.py)."""
    out = []
    label = setting_label(COMPUTE_MATCHED, setting)
    for bench in grid.benchmarks:
        arms = {run.label: run.override_items() for run in runs if run.benchmark == bench}  # one per variant
        extra = plan_compute_matched(path, bench, list(arms.values()), grid.compute_basis)
        if extra is not None:
            extra = tuple(e for e in extra if not e.startswith("run_label=")) + (f"run_label={label}",)
            out += [RunSpec(bench, "grpo", (), label, int(s), extra, setting) for s in grid.seeds]
    return out


def _strategy(raw: dict, path: Path) -> str:
    """The profile's ``train.strategy`` (the workflow launches an ``fsdp`` run with torchrun)."""
    import typing

    from harness.config_sections import TrainConfig
    from harness.core.typed import ConfigError

    value = (raw.get("train") or {}).get("strategy", TrainConfig.strategy)
    accepted = typing.get_args(typing.get_type_hints(TrainConfig)["strategy"])
    if value not in accepted:
        raise ConfigError(f"{path}: train.strategy: {value!r} is not accepted; choose one of {list(accepted)}")
    return value


def _check_unique(runs: list[RunSpec], path: Path) -> None:
    seen: dict[str, RunSpec] = {}
    for run in runs:
        if run.key in seen:
            raise ValueError(
                f"{path}: grid has two entries for run folder {run.key} ({seen[run.key].options or 'defaults'} and "
                f"{run.options or 'defaults'}); an option equal to its default adds nothing to the label — "
                "drop the duplicate entry"
            )
        seen[run.key] = run
