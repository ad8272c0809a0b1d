"""``GatesBenchmark``: a procedurally generated credit-assignment benchmark (panels, env, expert, prompt).

Panels do not depend on the run seed: every seed and method is evaluated on the same tasks. ``eval_in`` and
``eval_out`` are separate draws from the generator, disjoint from train and from each other (the layout space
has no held-out structure to be "out" of; both measure generalisation to unseen layouts).
"""
from __future__ import annotations

from typing import Sequence

from envs.base import BENCHMARKS, Benchmark, Expert, Observation, PromptTemplate, Task, TaskPanel, TextBounds, TextEnv
from envs.gates.config import GatesConfig
from envs.gates.env import GatesEnv, GatesExpert, longest_texts, task_text
from envs.gates.exact import exact_success
from envs.gates.prompts import gates_template, render_prompt
from envs.gates.skills import SKILLS
from envs.gates.tasks import layouts, settings_digest

TASK_TYPE = "gates"


@BENCHMARKS.register("gates")
class GatesBenchmark(Benchmark):
    Config = GatesConfig
    skills = SKILLS
    task_types = (TASK_TYPE,)
    labels_turns = True

    def __init__(self, config: GatesConfig | None = None, seed: int = 0, think: bool = False):
        config = config or GatesConfig()
        super().__init__(config, seed, think)
        self.max_steps = config.max_steps
        self._template = gates_template(think)
        self._panels: dict[str, list[Task]] = {}

    @property
    def template(self) -> PromptTemplate:
        return self._template

    def _tasks(self, split: str) -> list[Task]:
        if not self._panels:
            cfg, prefix = self.config, f"gates-{settings_digest(self.config)}"
            seen: set[str] = set()
            for name, size in (("train", cfg.train_panel_size), ("eval_in", cfg.eval_panel_size),
                               ("eval_out", cfg.eval_panel_size)):
                drawn = layouts(cfg, name, size, exclude=seen)
                seen |= {layout.signature for layout in drawn}
                self._panels[name] = [Task(f"{prefix}-{name}-{i:05d}", TASK_TYPE, name, layout)
                                      for i, layout in enumerate(drawn)]
        return self._panels[split]

    def panel(self, split: str, size: int | None = None) -> TaskPanel:
        if split not in self.splits:
            raise ValueError(f"gates has splits {list(self.splits)}, not {split!r}")
        tasks = self._tasks(split)
        if size is not None:
            if not 1 <= size <= len(tasks):
                raise ValueError(f"gates {split} panel size {size} is outside 1..{len(tasks)}; raise "
                                 f"gates.{'train' if split == 'train' else 'eval'}_panel_size to draw more tasks")
            tasks = tasks[:size]
        return TaskPanel("gates", split, tuple(tasks))

    def make_env(self) -> TextEnv:
        return GatesEnv(self.config.key_at_gates, self.config.alarm_delay)  # the rollout enforces the step limit

    def expert(self, task: Task) -> Expert:
        return GatesExpert(task.payload)

    def demonstrator(self, task: Task) -> Expert:
        return GatesExpert(task.payload, doors=self.config.demo_pivots)

    def task_description(self, task: Task, first_observation: Observation) -> str:
        return task_text(task.payload)

    def text_bounds(self) -> TextBounds:
        return TextBounds(*longest_texts(self.config))

    def exact_success(self, score, tasks: Sequence[Task], history_length: int) -> list[float] | None:
        """P(win) of each task by a DP over its states (envs/gates/exact.py); None with history in the prompt,
        where a state's prompt also depends on the path to it."""
        if history_length > 0:
            return None
        return exact_success(tasks, score, lambda text, obs, steps: self.format_prompt(text, [], obs, steps, 0),
                             self.config.key_at_gates, self.max_steps)

    def format_prompt(self, task_text: str, history: Sequence[tuple[str, str]], observation: Observation,
                      step: int, history_length: int) -> str:
        return render_prompt(self._template, task_text, history, observation, step, history_length)
