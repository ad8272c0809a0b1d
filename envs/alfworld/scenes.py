"""The scene layouts that the ``alfworld`` package ships, read as what a text game needs.

A layout is ``alfworld/gen/layouts/FloorPlan<N>-objects.json`` (the object classes present in the scene) plus
``FloorPlan<N>-openable.json`` (the receptacle instances, by THOR id, with a pose). Receptacle classes present
in the scene but absent from the pose file (a coffee machine, a toaster, ...) get one synthetic instance.

Scene splits follow ALFRED: eval-out uses the test scenes (FloorPlan 1-6, 201-206, 301-306, 401-406), never
seen in train, as ALFWorld's ``valid_unseen`` does; train and eval-in draw from the remaining scenes.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import alfworld.gen.constants as C

LAYOUT_DIR = Path(C.__file__).resolve().parent / "layouts"

MOVABLE_RECEPTACLES = frozenset(C.MOVABLE_RECEPTACLES)
STATIC_RECEPTACLES = frozenset(C.VAL_RECEPTACLE_OBJECTS) - MOVABLE_RECEPTACLES
OPENABLE = frozenset(C.OPENABLE_CLASS_LIST)
LAMPS = ("DeskLamp", "FloorLamp")
# lamps are static in THOR; the look-at-in-light goal needs the lamp to sit in a receptacle
LAMP_HOLDERS = ("SideTable", "Desk", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand")
_PLACEABLE = frozenset().union(*C.VAL_RECEPTACLE_OBJECTS.values())
PICKUPABLE = frozenset(o for o in C.OBJECTS if o in _PLACEABLE and o not in STATIC_RECEPTACLES)
CAN_CONTAIN = {r: frozenset(objs) for r, objs in C.VAL_RECEPTACLE_OBJECTS.items()}
HEATABLE = frozenset(C.VAL_ACTION_OBJECTS["Heatable"])
COOLABLE = frozenset(C.VAL_ACTION_OBJECTS["Coolable"])
CLEANABLE = frozenset(C.VAL_ACTION_OBJECTS["Cleanable"])

EVAL_OUT_SCENES = tuple(sorted(C.TEST_SCENE_NUMBERS))
TRAIN_SCENES = tuple(sorted(C.TRAIN_SCENE_NUMBERS))


def room_type(scene: int) -> str:
    for name, numbers in C.SCENE_TYPE.items():
        if scene in numbers:
            return name
    raise ValueError(f"scene {scene} is in no ALFRED room range {dict(C.SCENE_TYPE)}")


@dataclass(frozen=True)
class Receptacle:
    thor_id: str  # e.g. "Cabinet|+00.68|+00.50|-02.20" or "Sink|-01.90|+00.97|-01.50|SinkBasin"
    rclass: str  # e.g. "Cabinet", "SinkBasin"

    @property
    def openable(self) -> bool:
        return self.rclass in OPENABLE


@dataclass(frozen=True)
class Scene:
    number: int
    object_classes: frozenset[str]
    receptacles: tuple[Receptacle, ...]

    @property
    def room(self) -> str:
        return room_type(self.number)

    @property
    def receptacle_classes(self) -> frozenset[str]:
        return frozenset(r.rclass for r in self.receptacles)

    @property
    def pickupable_classes(self) -> tuple[str, ...]:
        return tuple(sorted(self.object_classes & PICKUPABLE))

    @property
    def lamps(self) -> tuple[str, ...]:
        return tuple(lamp for lamp in LAMPS if lamp in self.object_classes)


def _receptacle_class(thor_id: str) -> str:
    parts = thor_id.split("|")
    # THOR names a sink's or bathtub's basin "Sink|x|y|z|SinkBasin"
    return parts[-1] if len(parts) > 4 else parts[0]


@functools.lru_cache(maxsize=None)
def load_scene(number: int) -> Scene:
    objects_path = LAYOUT_DIR / f"FloorPlan{number}-objects.json"
    openable_path = LAYOUT_DIR / f"FloorPlan{number}-openable.json"
    if not objects_path.is_file() or not openable_path.is_file():
        raise FileNotFoundError(f"no layout for FloorPlan{number} in {LAYOUT_DIR}; available: {available_scenes()}")
    object_classes = frozenset(json.loads(objects_path.read_text()))
    receptacles = [Receptacle(tid, _receptacle_class(tid)) for tid in sorted(json.loads(openable_path.read_text()))]
    receptacles = [r for r in receptacles if r.rclass in STATIC_RECEPTACLES]
    present = {r.rclass for r in receptacles}
    for k, rclass in enumerate(sorted((object_classes & STATIC_RECEPTACLES) - present)):
        # a deterministic made-up pose; only its uniqueness matters to the text game
        receptacles.append(Receptacle(f"{rclass}|+0{k}.00|+00.00|+00.00", rclass))
    return Scene(number, object_classes, tuple(sorted(receptacles, key=lambda r: r.thor_id)))


@functools.lru_cache(maxsize=1)
def available_scenes() -> tuple[int, ...]:
    numbers = {int(p.name[len("FloorPlan"):].split("-")[0]) for p in LAYOUT_DIR.glob("FloorPlan*-objects.json")}
    return tuple(sorted(numbers))


def split_scenes(split: str) -> tuple[int, ...]:
    """Scenes a split draws from: eval-out scenes are never used by train or eval-in."""
    scenes = set(available_scenes())
    if split == "eval_out":
        return tuple(sorted(scenes & set(EVAL_OUT_SCENES)))
    if split in ("train", "eval_in"):
        return tuple(sorted(scenes - set(EVAL_OUT_SCENES)))
    raise ValueError(f"unknown split {split!r}; expected one of 'train', 'eval_in', 'eval_out'")
