"""Offline ALFWorld games: a scene layout + a seed -> a PDDL problem of one of the six task types.

``sample_spec`` draws what a game holds (pure Python, cheap, deterministic); ``write_problem`` renders the
PDDL problem the ``alfworld`` domain plans on, and ``traj_data`` the record the official loader and the
handcoded expert read. Entity names are mangled THOR ids (``Apple|+00.01|...`` -> ``apple_bar__plus_00...``)
so ``AlfredDemangler`` names them "apple 1", "cabinet 2", "sinkbasin 1" exactly as in the official games.
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from alfworld.gen import goal_library

from envs.alfworld.config import TASK_TYPES
from envs.alfworld.scenes import (
    CAN_CONTAIN,
    CLEANABLE,
    COOLABLE,
    HEATABLE,
    LAMP_HOLDERS,
    MOVABLE_RECEPTACLES,
    Receptacle,
    Scene,
    load_scene,
)

# short names used for per-type metrics (the paper's table columns)
SHORT_TYPE = dict(zip(TASK_TYPES, ("pick", "look", "clean", "heat", "cool", "pick2")))
# the appliance each state-change task needs, and which it may not use as the goal receptacle
APPLIANCE = {"pick_clean_then_place_in_recep": "SinkBasin", "pick_heat_then_place_in_recep": "Microwave",
             "pick_cool_then_place_in_recep": "Fridge"}
PROPERTY = {"pick_clean_then_place_in_recep": CLEANABLE, "pick_heat_then_place_in_recep": HEATABLE,
            "pick_cool_then_place_in_recep": COOLABLE}
# types the domain's action preconditions name; they must exist in every problem
DOMAIN_TYPES = ("SinkBasinType", "MicrowaveType", "FridgeType")
DOMAIN_OTYPES = ("KnifeType", "ButterKnifeType")


@dataclass(frozen=True)
class GameSize:
    """How big a generated game is. ``None`` = as in the full scene (the paper's size)."""

    max_receptacles: int | None = None  # receptacles kept (the task's own are always kept)
    num_distractors: int | None = None  # extra objects besides the target(s); None = one per class present
    max_instances: int = 2  # instances per distractor class when num_distractors is None


@dataclass(frozen=True)
class GameSpec:
    """Everything a game is made of; ``write_problem`` is a pure function of it."""

    scene: int
    task_type: str
    object_target: str
    parent_target: str  # "" for look_at_obj_in_light
    toggle_target: str  # "" unless look_at_obj_in_light
    task_desc: str
    receptacles: tuple[Receptacle, ...]
    objects: tuple[tuple[str, str], ...]  # (object THOR id, receptacle THOR id holding it)
    size: GameSize = field(default_factory=GameSize)

    @property
    def game_hash(self) -> str:
        return hashlib.sha256(write_problem(self).encode() + self.task_desc.encode()).hexdigest()

    @property
    def goal_class(self) -> str:
        """The 4th field of an official game folder name: the goal receptacle (or the lamp)."""
        return self.toggle_target or self.parent_target

    def folder_name(self) -> str:
        return f"{self.task_type}-{self.object_target}-None-{self.goal_class}-{self.scene}"


class NoTaskInScene(ValueError):
    """The scene cannot host the requested task type (no lamp, no fridge, ...)."""


def _target_choices(scene: Scene, task_type: str) -> list[tuple[str, str, str]]:
    """All (object, parent, toggle) triples the scene supports for ``task_type``."""
    rclasses = scene.receptacle_classes
    triples = []
    if task_type == "look_at_obj_in_light":
        if not scene.lamps or not rclasses & set(LAMP_HOLDERS):
            return []
        for obj in scene.pickupable_classes:
            if any(obj in CAN_CONTAIN[r] for r in rclasses):
                triples += [(obj, "", lamp) for lamp in scene.lamps]
        return triples
    appliance = APPLIANCE.get(task_type)
    if appliance and appliance not in rclasses:
        return []
    for obj in scene.pickupable_classes:
        if task_type in PROPERTY and obj not in PROPERTY[task_type]:
            continue
        for parent in sorted(rclasses):
            if parent != appliance and obj in CAN_CONTAIN[parent]:
                triples.append((obj, parent, ""))
    return triples


def scene_supports(scene_number: int, task_type: str) -> bool:
    return bool(_target_choices(load_scene(scene_number), task_type))


def _instance_id(oclass: str, n: int) -> str:
    # a made-up, unique THOR-style id; the demangler numbers instances by sorted id
    return f"{oclass}|+{n // 100:02d}.{n % 100:02d}|+00.00|+00.00"


def sample_spec(scene_number: int, task_type: str, seed: int, size: GameSize = GameSize()) -> GameSpec:
    """Draw a solvable game of ``task_type`` in ``scene_number``; same arguments -> same spec."""
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task type {task_type!r}; expected one of {TASK_TYPES}")
    scene = load_scene(scene_number)
    rng = random.Random(f"alfworld-gen|{scene_number}|{task_type}|{seed}")
    choices = _target_choices(scene, task_type)
    if not choices:
        raise NoTaskInScene(f"FloorPlan{scene_number} ({scene.room}) cannot host {task_type}")
    obj, parent, toggle = rng.choice(choices)

    def pick(rclasses) -> Receptacle:
        return rng.choice([r for r in scene.receptacles if r.rclass in rclasses])

    required: list[Receptacle] = []
    if parent:
        required.append(pick({parent}))
    if task_type in APPLIANCE:
        required.append(pick({APPLIANCE[task_type]}))
    if toggle:
        lamp_holder = pick(scene.receptacle_classes & set(LAMP_HOLDERS))
        required.append(lamp_holder)
    holders = [r for r in scene.receptacles if obj in CAN_CONTAIN[r.rclass] and r.rclass != parent]
    if not holders:
        raise NoTaskInScene(f"FloorPlan{scene_number}: no receptacle other than {parent} can hold {obj}")
    start_holder = rng.choice(holders)
    required.append(start_holder)
    required = list(dict.fromkeys(required))
    receptacles = _choose_receptacles(scene, required, size.max_receptacles, rng)

    n_targets = 2 if task_type == "pick_two_obj_and_place" else 1
    counter = iter(range(1, 10_000))
    objects = [(_instance_id(obj, next(counter)), start_holder.thor_id) for _ in range(n_targets)]
    if toggle:
        objects.append((_instance_id(toggle, next(counter)), lamp_holder.thor_id))
    for oclass in _distractor_classes(scene, {obj, toggle}, size, rng):
        places = [r for r in receptacles if oclass in CAN_CONTAIN[r.rclass] and r.rclass != parent]
        if places:
            objects.append((_instance_id(oclass, next(counter)), rng.choice(places).thor_id))
    template = rng.choice(goal_library.gdict[task_type]["templates"])
    desc = template.format(obj=obj.lower(), recep=parent.lower(), toggle=toggle.lower(), mrecep="")
    return GameSpec(scene_number, task_type, obj, parent, toggle, desc, tuple(sorted(receptacles, key=_rid)),
                    tuple(sorted(objects)), size)


def _rid(r: Receptacle) -> str:
    return r.thor_id


def _choose_receptacles(scene: Scene, required: list[Receptacle], limit: int | None, rng) -> list[Receptacle]:
    others = [r for r in scene.receptacles if r not in required]
    if limit is None:
        return required + others
    rng.shuffle(others)
    return required + others[: max(0, limit - len(required))]


def _distractor_classes(scene: Scene, exclude: set[str], size: GameSize, rng) -> list[str]:
    classes = [c for c in scene.pickupable_classes if c not in exclude]
    if size.num_distractors is None:
        return [c for c in classes for _ in range(rng.randint(1, size.max_instances))]
    return [rng.choice(classes) for _ in range(size.num_distractors)] if classes else []


def mangle(thor_id: str) -> str:
    """THOR id -> PDDL name, the inverse of ``alfworld``'s Demangler (which lower-cases via the PDDL parser)."""
    for plain, coded in (("|", "_bar_"), ("-", "_minus_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        thor_id = thor_id.replace(plain, coded)
    return thor_id


def _object_class(thor_id: str) -> str:
    return thor_id.split("|", 1)[0]


def write_problem(spec: GameSpec) -> str:
    """The PDDL problem of ``spec`` for ``alfworld/data/alfred.pddl``; deterministic text."""
    objects = [(mangle(o), _object_class(o), mangle(r)) for o, r in spec.objects]
    receps = [(mangle(r.thor_id), r.rclass, r.openable) for r in spec.receptacles]
    location = {name: f"loc_bar_{k + 1}" for k, (name, _, _) in enumerate(receps)}
    otypes = sorted({f"{c}Type" for _, c, _ in objects} | set(DOMAIN_OTYPES) | {f"{spec.object_target}Type"})
    rtypes = sorted({f"{c}Type" for _, c, _ in receps} | set(DOMAIN_TYPES))
    decl = ["agent1 - agent", *(f"{t} - otype" for t in otypes), *(f"{t} - rtype" for t in rtypes),
            *(f"{o} - object" for o, _, _ in objects), *(f"{r} - receptacle" for r, _, _ in receps),
            "loc_bar_0 - location", *(f"{loc} - location" for loc in location.values())]
    init = ["(atLocation agent1 loc_bar_0)"]
    for name, rclass, openable in receps:
        init += [f"(receptacleType {name} {rclass}Type)", f"(receptacleAtLocation {name} {location[name]})"]
        init += [f"(openable {name})"] if openable else []
    for name, oclass, holder in objects:
        init += [f"(objectType {name} {oclass}Type)", f"(inReceptacle {name} {holder})",
                 f"(objectAtLocation {name} {location[holder]})"]
        init += [f"({pred} {name})" for pred, ok in _object_predicates(oclass) if ok]
    present_o = {c for _, c, _ in objects}
    for rclass in sorted({c for _, c, _ in receps}):
        init += [f"(canContain {rclass}Type {o}Type)" for o in sorted(present_o & CAN_CONTAIN[rclass])]
    goal = goal_library.gdict[spec.task_type]["pddl"].format(
        obj=spec.object_target, recep=spec.parent_target, toggle=spec.toggle_target, mrecep="").replace("#", "-")
    lines = [f"(define (problem alfworld_gen_{spec.scene})", "(:domain alfred)", "(:objects",
             *(f"    {d}" for d in decl), ")", "(:init", *(f"    {f}" for f in init), ")"]
    # the library's goal text closes the (define ...) itself
    return "\n".join(lines) + "\n" + "\n".join(line.rstrip() for line in goal.strip("\n").splitlines()) + "\n"


def _object_predicates(oclass: str):
    return (("pickupable", oclass not in ("DeskLamp", "FloorLamp")),
            ("isReceptacleObject", oclass in MOVABLE_RECEPTACLES),
            ("cleanable", oclass in CLEANABLE), ("heatable", oclass in HEATABLE), ("coolable", oclass in COOLABLE),
            ("toggleable", oclass in ("DeskLamp", "FloorLamp")))


def traj_data(spec: GameSpec, task_id: str) -> dict:
    """The ``traj_data.json`` record ``AlfredTWEnv`` and the handcoded expert read."""
    return {
        "task_id": task_id,
        "task_type": spec.task_type,
        "pddl_params": {"object_target": spec.object_target, "parent_target": spec.parent_target,
                        "toggle_target": spec.toggle_target, "mrecep_target": "", "object_sliced": False},
        "scene": {"floor_plan": f"FloorPlan{spec.scene}", "scene_num": spec.scene},
        "turk_annotations": {"anns": [{"task_desc": spec.task_desc, "high_descs": [], "assignment_id": "generated"}]},
        "generator": {"source": "envs.alfworld.gamegen", "max_receptacles": spec.size.max_receptacles,
                      "num_distractors": spec.size.num_distractors, "max_instances": spec.size.max_instances},
    }
