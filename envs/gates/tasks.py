"""Deterministic task generation for Gates: one layout per (split, index), independent of the run seed.

A layout is a sequence of ``horizon`` halls, ``pivots`` gates and ``decoys`` decoy gates in a random order (the
episode never opens on a gate, so the first observation is always a hall). Each hall has a sign pointing left or
right; each gate offers ``choices`` coloured doors, one of them the colour of the key the task names. A decoy gate
is drawn the same way and looks the same; only its flag says that every door is safe. The splits come from
separate random streams, and an eval task whose layout also occurs in train is skipped, so the panels share
no task.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

from envs.gates.config import COLOURS, GatesConfig

DIRECTIONS = ("left", "right")


@dataclass(frozen=True)
class Hall:
    sign: str  # "left" | "right"


@dataclass(frozen=True)
class Gate:
    doors: tuple[str, ...]  # colours in the order shown
    decoy: bool = False  # every door is safe (not shown to the agent)


@dataclass(frozen=True)
class Layout:
    key: str
    cells: tuple[Hall | Gate, ...]

    @property
    def signature(self) -> str:
        cells = [c.sign if isinstance(c, Hall) else "/".join(c.doors) + ("*" if c.decoy else "") for c in self.cells]
        return f"{self.key}:{'|'.join(cells)}"


def settings_digest(cfg: GatesConfig) -> str:
    """The generator inputs (not the panel sizes or the demonstrator): changed inputs, changed task ids."""
    key = {k: getattr(cfg, k) for k in ("horizon", "pivots", "choices", "colours")}
    if cfg.key_at_gates:  # the same layouts, shown differently: other task ids
        key["key_at_gates"] = True
    if cfg.decoys:  # keyed only when set, so the ids of corridors without decoys stay what they were
        key["decoys"] = cfg.decoys
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]


def generate(cfg: GatesConfig, split: str, index: int) -> Layout:
    rng = random.Random(f"gates/{settings_digest(cfg)}/{split}/{index}")
    palette = list(COLOURS[: cfg.colours])
    key = rng.choice(palette)
    gate_slots = rng.sample(range(1, cfg.cells), cfg.pivots + cfg.decoys)
    decoy_slots = set(gate_slots[cfg.pivots:])
    cells: list[Hall | Gate] = []
    for slot in range(cfg.cells):
        if slot in gate_slots:
            doors = [key] + rng.sample([c for c in palette if c != key], cfg.choices - 1)
            rng.shuffle(doors)
            cells.append(Gate(tuple(doors), decoy=slot in decoy_slots))
        else:
            cells.append(Hall(rng.choice(DIRECTIONS)))
    return Layout(key, tuple(cells))


def layouts(cfg: GatesConfig, split: str, size: int, exclude: set[str] = frozenset()) -> list[Layout]:
    """``size`` distinct layouts of ``split``, none of whose signatures is in ``exclude``."""
    out: list[Layout] = []
    seen = set(exclude)
    index = 0
    while len(out) < size:
        if index > 50 * size + 1000:
            raise ValueError(f"gates: cannot draw {size} distinct {split} tasks from this small a layout space "
                             f"(horizon={cfg.horizon}, pivots={cfg.pivots}, decoys={cfg.decoys}); lower the panel size")
        layout = generate(cfg, split, index)
        index += 1
        if layout.signature not in seen:
            seen.add(layout.signature)
            out.append(layout)
    return out
