"""ALFWorld benchmark options (the ``alfworld:`` section of a run config); the defaults are the paper's protocol.

A profile that shrinks the game (config/tiny.yaml, config/smoke.yaml) says so in its own ``alfworld:`` section;
``resolve`` turns a config into the frozen ``AlfworldSettings`` that the generator, the env and the prompts read.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from harness.core.ranges import Checked
from harness.core.typed import ConfigError

PAPER_TRAIN_GAMES = 3600  # generated train games when no official data is present (the official train split: 3553)
# the six ALFWorld task types (alfworld.gen's goal library names); here, not in gamegen, so that reading a config
# needs no alfworld package
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
PAPER_EVAL_GAMES = {"eval_in": 140, "eval_out": 134}  # the official valid_seen / valid_unseen splits


@dataclass
class AlfworldConfig(Checked):
    section = "alfworld"
    # no credit_label on its steps; said here too, so a check needs no engine (whose packages may be absent)
    labels_turns = False

    data_path: str | None = field(default=None, metadata={
        "help": "the official json_2.1.1 tree; null = $ALFWORLD_DATA if set, else generated offline games"})
    source: Literal["auto", "official", "generated"] = field(default="auto", metadata={
        "help": "official games (needs data_path), generated ones, or auto: official when a data path is set"})
    max_steps: int = field(default=50, metadata={"help": "actions per episode at most", "range": ">= 1"})
    train_panel_size: int | None = field(default=None, metadata={
        "help": f"train tasks; null = every official training game, or {PAPER_TRAIN_GAMES} generated ones",
        "range": ">= 1"})
    eval_panel_size: int | None = field(default=None, metadata={
        "help": f"tasks of each eval panel; null = the official split sizes {PAPER_EVAL_GAMES}", "range": ">= 1"})
    cache_dir: str = field(default="results/cache/alfworld", metadata={"help": "where generated games are cached"})
    # Generated games (ignored with official data)
    max_receptacles: int = field(default=0, metadata={
        "help": "receptacles per generated game; 0 = every receptacle of the scene (paper)", "range": ">= 0"})
    num_distractors: int = field(default=-1, metadata={"help": (
        "objects besides the target(s); -1 = one to max_instances per class (paper)"), "range": ">= -1"})
    max_instances: int = field(default=2, metadata={
        "help": "per distractor class when num_distractors = -1", "range": ">= 1"})
    scenes: list[int] | None = field(default=None, metadata={
        "help": "layouts to draw from (FloorPlan numbers); null = all that ship with alfworld", "range": ">= 1"})
    task_types: list[str] | None = field(default=None, metadata={"help": "subset of the six types; null = all six"})
    panel_seed: int = field(default=0, metadata={
        "help": "which generated games make the panels (not the run seed: panels stay fixed across seeds)",
        "range": ">= 0"})


    def __post_init__(self):
        super().__post_init__()
        unknown = sorted(set(self.task_types or ()) - set(TASK_TYPES))
        if unknown:
            raise ConfigError(f"alfworld.task_types: unknown {unknown}; choose from {list(TASK_TYPES)}")

@dataclass(frozen=True)
class AlfworldSettings:
    """The resolved sizing of one ALFWorld instance (its source and panel sizes decided, the prompt's think)."""

    source: str  # "official" | "generated"
    data_path: str | None
    max_steps: int
    think: bool
    max_receptacles: int | None  # None = all
    num_distractors: int | None  # None = one to max_instances per class present
    max_instances: int
    scenes: tuple[int, ...] | None
    task_types: tuple[str, ...]
    panel_seed: int
    panel_sizes: tuple[tuple[str, int | None], ...]  # split -> size (None = every game of the split)
    cache_dir: str

    def panel_size(self, split: str) -> int | None:
        return dict(self.panel_sizes)[split]


SPLITS = ("train", "eval_in", "eval_out")


def resolve(config: AlfworldConfig, official_available: bool, think: bool = False) -> AlfworldSettings:
    """Resolve ``source: auto`` and the panel sizes; ``official_available`` = a data path is configured."""
    source = config.source if config.source != "auto" else ("official" if official_available else "generated")
    task_types = tuple(config.task_types) if config.task_types else TASK_TYPES
    train = config.train_panel_size
    if train is None and source == "generated":
        train = PAPER_TRAIN_GAMES
    sizes = {"train": train, **{split: config.eval_panel_size or size for split, size in PAPER_EVAL_GAMES.items()}}
    return AlfworldSettings(
        source=source, data_path=config.data_path, max_steps=config.max_steps, think=think,
        max_receptacles=config.max_receptacles or None,
        num_distractors=None if config.num_distractors == -1 else config.num_distractors,
        max_instances=config.max_instances, scenes=tuple(config.scenes) if config.scenes else None,
        task_types=task_types, panel_seed=config.panel_seed, panel_sizes=tuple(sizes.items()),
        cache_dir=config.cache_dir)
