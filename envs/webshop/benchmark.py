"""``WebshopBenchmark``: panels, envs, the expert and the prompt for WebShop (offline catalogue or a real site).

Splits. WebShop has one evaluation pool (verl-agent evaluates on goals 0..499), so ``eval_in`` and ``eval_out``
are the same goals (their panel hashes differ only by the split name); ``train`` is every other goal. Goals of
one product may fall in both pools, as in WebShop. Panels do not depend on the run seed: every seed and method
is evaluated on the same goals.

Task ids: ``webshop-<first 8 hex of the catalogue digest>-<goal index>`` offline, so a changed generator or
sizing changes the panel hashes; ``webshop-remote-<goal index>`` against a real site.
"""
from __future__ import annotations

from typing import Sequence

from envs.base import BENCHMARKS, Benchmark, Expert, Observation, PromptTemplate, Task, TaskPanel, TextBounds, TextEnv
from envs.webshop.catalogue import Catalogue, build_catalogue
from envs.webshop.catalogue_spec import CATEGORY_ROOTS
from envs.webshop.config import WebshopConfig, WebshopSettings, resolve
from envs.webshop.env import WebshopEnv
from envs.webshop.expert import WebshopExpert
from envs.webshop.prompts import render_prompt, webshop_template
from envs.webshop.remote import RemoteGoal, RemoteWebShop
from envs.webshop.search import SearchIndex, search_index
from envs.webshop.skills import SKILLS

REMOTE_EVAL_POOL = 500  # a real site: verl-agent's test goals 0..499, train goals from 500
REMOTE_TRAIN_GOALS = 4500  # default remote train panel: goals 500..4999 (WebShop's 1000-product set has 6910)


@BENCHMARKS.register("webshop")
class WebshopBenchmark(Benchmark):
    Config = WebshopConfig
    skills = SKILLS
    task_types = tuple(sorted(CATEGORY_ROOTS))

    def __init__(self, config: WebshopConfig | None = None, seed: int = 0, think: bool = False):
        config = config or WebshopConfig()
        super().__init__(config, seed, think)
        self.settings: WebshopSettings = resolve(config, think)
        self.max_steps = self.settings.max_steps
        self._template = webshop_template(think)
        self.catalogue: Catalogue | None = None
        self.index: SearchIndex | None = None
        if config.url:
            RemoteWebShop(config.url, config.request_timeout_s, self.settings.max_steps)  # probes: fails now
        else:
            self.catalogue = build_catalogue(*self.settings.catalogue_key())
            self.index = search_index(self.catalogue)

    @property
    def remote(self) -> bool:
        return self.catalogue is None

    @property
    def template(self) -> PromptTemplate:
        return self._template

    # ------------------------------------------------------------------ panels
    def panel(self, split: str, size: int | None = None) -> TaskPanel:
        if split not in self.splits:
            raise ValueError(f"webshop has splits {list(self.splits)}, not {split!r}")
        tasks = self._remote_tasks(split) if self.remote else self._offline_tasks(split)
        if size is not None:
            if not 1 <= size <= len(tasks):
                raise ValueError(f"webshop {split} panel size {size} is outside 1..{len(tasks)}")
            tasks = tasks[:size]
        return TaskPanel("webshop", split, tuple(tasks))

    def _default_size(self, split: str, available: int) -> int:
        wanted = self.settings.train_panel_size if split == "train" else self.settings.eval_panel_size
        return available if wanted is None else min(wanted, available)

    def _offline_tasks(self, split: str) -> list[Task]:
        pool = self.settings.eval_pool_size
        first, goals = (pool, self.catalogue.train_goals) if split == "train" else (0, self.catalogue.eval_goals)
        prefix = f"webshop-{self.catalogue.digest[:8]}"
        count = self._default_size(split, len(goals))
        return [Task(f"{prefix}-{first + i:05d}", goal.category, split, goal) for i, goal in enumerate(goals[:count])]

    def _remote_tasks(self, split: str) -> list[Task]:
        pool = REMOTE_EVAL_POOL
        first, available = (pool, REMOTE_TRAIN_GOALS) if split == "train" else (0, pool)
        count = self._default_size(split, available)
        return [Task(f"webshop-remote-{first + i:05d}", "unknown", split, RemoteGoal(first + i))
                for i in range(count)]

    # ------------------------------------------------------------------ envs, expert, prompts
    def make_env(self) -> TextEnv:
        if self.remote:
            return RemoteWebShop(self.config.url, self.config.request_timeout_s, self.settings.max_steps)
        return WebshopEnv(self.catalogue, self.index, self.settings)

    def expert(self, task: Task) -> Expert:
        if self.remote:
            raise NotImplementedError("the scripted WebShop expert needs the goal's product and options, which a "
                                      "remote WebShop site does not reveal; use the offline catalogue (no "
                                      "webshop.url) for demonstrations")
        return WebshopExpert(task.payload)

    def text_bounds(self) -> TextBounds:
        if self.remote:
            raise NotImplementedError("a remote WebShop site does not reveal its catalogue: its longest texts "
                                      "are unknown before the run (teacher/truncated_frac still counts cut rows)")
        goals = self.catalogue.train_goals + self.catalogue.eval_goals
        return TextBounds(*self.make_env().longest_texts(goals))

    def task_description(self, task: Task, first_observation: Observation) -> str:
        instruction = first_observation.info.get("instruction")
        return instruction or getattr(task.payload, "instruction_text", first_observation.text)

    def format_prompt(self, task_text: str, history: Sequence[tuple[str, str]], observation: Observation,
                      step: int, history_length: int) -> str:
        return render_prompt(self._template, task_text, history, observation, step, history_length)
