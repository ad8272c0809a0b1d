"""A three-step key-and-door game: a real ``Benchmark`` small enough for engine tests to run in seconds.

The task names the key colour; the agent must take that key and then open the door. Taking a wrong key and
opening the door fails the episode. It exercises everything the engine relies on (panels, prompts, history,
admissible actions, an expert, rewards, done) without the cost of a real benchmark.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from envs.base import (
    BENCHMARKS,
    INVALID_ACTION_FEEDBACK,
    Benchmark,
    Expert,
    Observation,
    PromptTemplate,
    StepResult,
    Task,
    TaskPanel,
    TextEnv,
)
from harness.core.ranges import Checked

COLOURS = ("red", "blue", "green", "gold")
TEMPLATE = PromptTemplate(
    name="toy-door",
    first="Task: {task}\nObservation: {observation}\nAdmissible actions: [{actions}]\n"
          "Answer with <action>...</action>.",
    with_history="Task: {task}\nHistory: {history}\nObservation: {observation}\nAdmissible actions: [{actions}]\n"
                 "Answer with <action>...</action>.",
)


class DoorEnv(TextEnv):
    max_steps = 4

    def reset(self, task: Task) -> Observation:
        self.target, self.holding, self.steps = task.payload, None, 0
        return self._observation("You are in a room with a locked door and four keys.")

    def _observation(self, text: str) -> Observation:
        actions = [f"take {c} key" for c in COLOURS if c != self.holding] + ["open door"]
        return Observation(text, actions, {})

    def step(self, action: str) -> StepResult:
        self.steps += 1
        valid = action in self._observation("").admissible_actions
        done = won = False
        if not valid:
            text = INVALID_ACTION_FEEDBACK
        elif action == "open door":
            won = self.holding == self.target
            done = True
            text = "The door opens." if won else "The key does not fit. The door stays shut."
        else:
            self.holding = action.split()[1]
            text = f"You take the {self.holding} key."
        done = done or self.steps >= self.max_steps
        info = {"won": won, "action_valid": valid, "task_type": f"door_{self.target}"}
        if done:
            info["task_score"] = float(won)
        return StepResult(self._observation(text), 10.0 * won, done, info)


class DoorExpert(Expert):
    def __init__(self, target: str):
        self.target = target

    def act(self, observation: Observation) -> str:
        take = f"take {self.target} key"
        return take if take in observation.admissible_actions else "open door"


@dataclass
class DoorConfig(Checked):
    section = "toy"

    train_tasks: int = field(default=16, metadata={"help": "train tasks (the colours cycle)", "range": ">= 1"})


@BENCHMARKS.register("toy")  # the one line that makes it a benchmark: `benchmark: toy` and a `toy:` section now work
class DoorBenchmark(Benchmark):
    Config = DoorConfig
    task_types = tuple(f"door_{c}" for c in COLOURS)
    max_steps = 4

    @property
    def template(self) -> PromptTemplate:
        return TEMPLATE

    def panel(self, split: str, size: int | None = None) -> TaskPanel:
        count = {"train": self.config.train_tasks, "eval_in": 4, "eval_out": 4}[split]
        tasks = tuple(Task(f"{split}-{i}", f"door_{COLOURS[i % 4]}", split, payload=COLOURS[i % 4])
                      for i in range(count))
        return TaskPanel("toy", split, tasks[:size] if size else tasks)

    def make_env(self) -> TextEnv:
        return DoorEnv()

    def expert(self, task: Task) -> Expert:
        return DoorExpert(task.payload)

    def task_description(self, task: Task, first_observation: Observation) -> str:
        return f"open the door with the {task.payload} key"

    def format_prompt(self, task_text, history, observation, step, history_length) -> str:
        shown = "; ".join(f"{obs} -> {act}" for obs, act in history[-history_length:]) if history_length else ""
        return TEMPLATE.render(len(history), task=task_text, history=shown, observation=observation.text,
                               actions=", ".join(observation.admissible_actions))
