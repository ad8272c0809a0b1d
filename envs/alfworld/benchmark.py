"""``AlfworldBenchmark``: ALFWorld on the ``alfworld`` package's engine, official games or generated ones."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from envs.alfworld.config import SPLITS, AlfworldConfig, AlfworldSettings, resolve
from envs.alfworld.engine import AlfworldEnv, WalkthroughExpert, read_walkthrough
from envs.alfworld.gamegen import TASK_TYPES
from envs.alfworld.handcoded import HandcodedExpert
from envs.alfworld.official import check_tree, configured_data_path
from envs.alfworld.panels import GameResolver, generated_tasks, official_tasks
from envs.alfworld.prompts import alfworld_template, extract_task, render
from envs.alfworld.skills import SKILLS
from envs.base import BENCHMARKS, Benchmark, Expert, Observation, PromptTemplate, Task, TaskPanel, TextBounds, TextEnv


@BENCHMARKS.register("alfworld")
class AlfworldBenchmark(Benchmark):
    Config = AlfworldConfig
    skills = SKILLS
    task_types = TASK_TYPES

    def __init__(self, config: AlfworldConfig | None = None, seed: int = 0, think: bool = False):
        config = config or AlfworldConfig()
        super().__init__(config, seed, think)
        data_path = configured_data_path(config.data_path) if config.source != "generated" else None
        self.settings: AlfworldSettings = resolve(config, official_available=data_path is not None, think=think)
        if self.settings.source == "official" and data_path is None:
            check_tree(Path(""))  # raises with the how-to-get-it message
        self.official_root = check_tree(data_path) if self.settings.source == "official" else None
        cache = Path(self.settings.cache_dir)
        self.games_root = str(cache / "games")
        self.translation_dir = str(cache / "sas")
        self.max_steps = self.settings.max_steps
        self._template = alfworld_template(think)
        self._panels: dict[tuple[str, int | None], TaskPanel] = {}

    @classmethod
    def preflight(cls, config: AlfworldConfig) -> str | None:
        if config.data_path and not Path(config.data_path).is_dir():
            return (f"alfworld.data_path={config.data_path} does not exist; point it at the json_2.1.1 tree, "
                    "or leave it unset")
        return None

    @property
    def template(self) -> PromptTemplate:
        return self._template

    def panel(self, split: str, size: int | None = None) -> TaskPanel:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        key = (split, size)
        if key not in self._panels:
            self._panels[key] = TaskPanel("alfworld", split, tuple(self._tasks(split, size)))
        return self._panels[key]

    def _tasks(self, split: str, size: int | None) -> list[Task]:
        wanted = size if size is not None else self.settings.panel_size(split)
        if self.official_root is not None:
            tasks = official_tasks(self.official_root, split, self.settings.task_types)
            if size is not None and size > len(tasks):
                raise ValueError(f"alfworld: asked for {size} {split} games, the official data has {len(tasks)}")
            return tasks[:wanted]  # a default panel size larger than the data takes every game
        if wanted is None:
            raise ValueError("alfworld: generated panels need a size (alfworld.train_panel_size / eval_panel_size)")
        exclude = frozenset()
        if split == "eval_in":  # eval-in shares train's scenes but never its games
            exclude = frozenset(self.panel("train").task_ids)
        return generated_tasks(self.settings, split, wanted, exclude)

    def make_env(self) -> TextEnv:
        return AlfworldEnv(self.resolver(), max_steps=self.settings.max_steps,
                           translation_cache_dir=self.translation_dir)

    def resolver(self) -> GameResolver:
        return GameResolver(self.games_root, self.translation_dir)

    def game_file(self, task: Task) -> Path:
        """The task's game file (generating it on first use)."""
        return self.resolver()(task)

    def expert(self, task: Task) -> Expert:
        """Replays the game's walkthrough; a game without one is played by alfworld's handcoded expert."""
        game = self.game_file(task)
        walkthrough = read_walkthrough(game)
        if walkthrough is None:
            return HandcodedExpert(game, self.translation_dir)
        return WalkthroughExpert(walkthrough)

    def task_description(self, task: Task, first_observation: Observation) -> str:
        return extract_task(first_observation.text)

    def text_bounds(self) -> TextBounds:
        """From the scenes' vocabulary: the grammar's longest two-name command (alfred.twl2's ``clean {o} with
        {r}``) on the longest names, and the longest listing (every receptacle of a room, or every object class
        of a scene max_instances times on one receptacle), instance numbers counted as two digits."""
        from envs.alfworld.scenes import available_scenes, load_scene

        scenes = [load_scene(n) for n in (self.settings.scenes or available_scenes())]
        names = {c.lower() + " 99" for scene in scenes for c in scene.object_classes | scene.receptacle_classes}
        longest = max(names, key=len)
        copies = max(self.settings.max_instances, 1)
        listings = [", ".join(f"a {r.rclass.lower()} 99" for r in scene.receptacles) for scene in scenes]
        listings += [", ".join(f"a {c.lower()} 99" for c in scene.pickupable_classes for _ in range(copies))
                     for scene in scenes]
        observation = f"You arrive at {longest}. On the {longest}, you see {max(listings, key=len)}."
        return TextBounds(f"clean {longest} with {longest}", observation)

    def format_prompt(self, task_text: str, history: Sequence[tuple[str, str]], observation: Observation,
                      step: int, history_length: int) -> str:
        return render(self._template, task_text, history, observation, step, history_length)

    def __getstate__(self):  # panels are rebuilt on demand; workers only need settings and paths
        return {**self.__dict__, "_panels": {}}

