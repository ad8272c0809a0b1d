"""The Gates game: walk a corridor of halls (follow the sign) and gates (open the door of the key's colour).

A wrong turn in a hall is harmless but costs a step. A wrong door at a gate loses the episode: at once
(``alarm_delay`` 0), or ``alarm_delay`` turns later, the observations until then being those the right door would
have shown, so the turn that lost the episode is not its last and an outcome-level advantage also blames the turns
after it. A decoy gate looks like any gate but every door is safe. An action outside the admissible list ends the
episode (as a loss, marked invalid), so a failing rollout is never longer than the corridor plus the slack: with
recoverable invalid actions, failing rollouts looped on invalid output until the step limit, their many
negative-advantage rows pushed the action format itself down under GRPO, and the policy collapsed to 0% valid
actions (measured). Passing the last cell with no alarm raised wins (reward 1, the only non-zero reward).
Observations name the cell's position, so rollouts of one task that reach the same cell see the same text
(GiGPO's anchor states).

Every step is labelled with what it did to the episode (``info["credit_label"]``, docs/credit.md): ``fatal`` (the
wrong door that lost it), ``detour`` (a wrong hall turn), ``invalid`` (an action outside the list), ``neutral`` (a
decoy gate, or any turn after the fatal one: nothing it chose could change the outcome) or ``correct``.
"""
from __future__ import annotations

from envs.base import CREDIT_LABELS, INVALID_ACTION_FEEDBACK, Expert, Observation, StepResult, Task, TextEnv
from envs.gates.config import COLOURS, GatesConfig
from envs.gates.tasks import DIRECTIONS, Gate, Hall, Layout

CORRECT, DETOUR, FATAL, INVALID, NEUTRAL = CREDIT_LABELS
ALARM_AT_EXIT = "you reach the exit, but a wrong door raised the alarm. the run ends."
ALARM_CAUGHT = "the alarm catches up with you. the run ends."


def describe(layout: Layout, position: int, key_at_gates: bool = False) -> Observation:
    cell = layout.cells[position]
    if isinstance(cell, Hall):
        return Observation(f"hall {position + 1}: a sign points {cell.sign}.", ["go left", "go right"])
    reminder = f" your key is {layout.key}." if key_at_gates else ""
    return Observation(f"gate {position + 1}: doors {', '.join(cell.doors)}.{reminder}",
                       [f"open {c}" for c in cell.doors])


def task_text(layout: Layout) -> str:
    return f"reach the exit. you hold the {layout.key} key."


def longest_texts(cfg: GatesConfig) -> tuple[str, str]:
    """(the longest action, the longest observation) of any episode under ``cfg``: the longest colours at the
    last cell (a two-digit position shows as such), every text the env can answer with."""
    colours = sorted(COLOURS[: cfg.colours], key=len, reverse=True)
    cells = cfg.cells
    gate = Layout(colours[0], (Gate(tuple(colours[: cfg.choices])),) * cells)
    hall = Layout(colours[0], (Hall(max(DIRECTIONS, key=len)),) * cells)
    actions = [f"go {d}" for d in DIRECTIONS] + [f"open {c}" for c in colours]
    observations = [describe(gate, cells - 1, cfg.key_at_gates).text, "a wall. " + describe(hall, cells - 1).text,
                    f"the {colours[0]} door was locked. the alarm ends your run.", "you reach the exit.",
                    ALARM_AT_EXIT, ALARM_CAUGHT,
                    f"{INVALID_ACTION_FEEDBACK} you are lost; the run ends."]
    return max(actions, key=len), max(observations, key=len)


class GatesEnv(TextEnv):
    def __init__(self, key_at_gates: bool = False, alarm_delay: int = 0):
        self.key_at_gates = key_at_gates
        self.alarm_delay = alarm_delay
        self.layout: Layout | None = None
        self.task: Task | None = None
        self.position = 0
        self.steps = 0
        self.turns_since_alarm: int | None = None  # None: no wrong door opened yet

    def reset(self, task: Task) -> Observation:
        self.task, self.layout = task, task.payload
        self.position, self.steps, self.turns_since_alarm = 0, 0, None
        obs = describe(self.layout, 0, self.key_at_gates)
        obs.info["instruction"] = task_text(self.layout)
        return obs

    def step(self, action: str) -> StepResult:
        if self.layout is None:
            raise RuntimeError("GatesEnv.step before reset")
        self.steps += 1
        current = describe(self.layout, self.position, self.key_at_gates)
        action = (action or "").strip().lower()
        if action not in current.admissible_actions:
            return self._result(Observation(f"{INVALID_ACTION_FEEDBACK} you are lost; the run ends.", []),
                                INVALID, valid=False, done=True)
        label = self._label(self.layout.cells[self.position], action, self.turns_since_alarm is not None)
        if self.turns_since_alarm is not None:  # a wrong door was opened earlier: the delay runs out?
            self.turns_since_alarm += 1
            if self.turns_since_alarm >= self.alarm_delay:
                return self._result(Observation(ALARM_CAUGHT, []), label, done=True)
        if label == FATAL:
            if self.alarm_delay == 0:
                colour = action.split(" ", 1)[1]
                return self._result(Observation(f"the {colour} door was locked. the alarm ends your run.", []),
                                    FATAL, done=True)
            self.turns_since_alarm = 0
        if self._is_wall(action):
            return self._result(Observation(f"a wall. {current.text}", current.admissible_actions), label)
        return self._advance(label)

    def _label(self, cell, action: str, doomed: bool) -> str:
        if doomed or (isinstance(cell, Gate) and cell.decoy):
            return NEUTRAL
        if isinstance(cell, Gate):
            return CORRECT if action == f"open {self.layout.key}" else FATAL
        return CORRECT if action == f"go {cell.sign}" else DETOUR

    def _is_wall(self, action: str) -> bool:
        cell = self.layout.cells[self.position]
        return isinstance(cell, Hall) and action != f"go {cell.sign}"

    def _advance(self, label: str) -> StepResult:
        self.position += 1
        if self.position < len(self.layout.cells):
            return self._result(describe(self.layout, self.position, self.key_at_gates), label)
        if self.turns_since_alarm is not None:
            return self._result(Observation(ALARM_AT_EXIT, []), label, done=True)
        return self._result(Observation("you reach the exit.", []), label, done=True, won=True)

    def _result(self, obs: Observation, label: str, valid: bool = True, done: bool = False,
                won: bool = False) -> StepResult:
        # credit_label: the ground truth the engine scores each method's per-turn advantages against (docs/credit.md)
        info = {"won": won, "action_valid": valid, "credit_label": label}
        if done:
            info.update(task_type=self.task.task_type, task_score=float(won))
        return StepResult(obs, 1.0 if won else 0.0, done, info)


class GatesExpert(Expert):
    """Follows every sign and opens the key's door. With ``doors="uniform"`` (the format expert of the warm start)
    it teaches every door of a gate as an equally good response, while still walking through the key's door so
    the demonstration goes on: the warm start then plays the halls right and the gates at chance, and RL has the
    pivots left to learn. (Demonstrating one random door per gate instead let the warm start memorise that door
    for each train task: rollouts of a task then all chose alike and 9 groups in 10 had one outcome; measured.)"""

    def __init__(self, layout: Layout, doors: str = "expert"):
        self.layout = layout
        self.doors = doors  # "expert" | "uniform" | "leaning" (GatesConfig.demo_pivots)

    def act(self, observation: Observation) -> str:
        text = observation.text.removeprefix("a wall. ")
        if text.startswith("hall"):
            return "go " + text.rstrip(".").rsplit(" ", 1)[1]
        return f"open {self.layout.key}"

    def targets(self, observation: Observation, action: str) -> list[str]:
        if self.doors == "expert" or not observation.text.startswith("gate"):
            return [action]
        return list(observation.admissible_actions) + ([action] if self.doors == "leaning" else [])
