"""The text-environment interface shared by every benchmark.

- ``Task``: one episode's specification (id, type, split); ``TaskPanel``: a frozen, hashed, ordered list of tasks.
- ``TextEnv``: ``reset(task) -> Observation`` and ``step(action) -> StepResult`` for one game.
- ``Benchmark``: makes envs, task panels, the prompt template and a scripted expert for one benchmark.
- ``parse_action``: verl-agent's projection of a model output onto an env action.
- ``PromptTemplate``: a prompt format as data, with a sha256 that runs log.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import pkgutil
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Sequence

from harness.core.plugins import Registry
from harness.core.ranges import Checked
from harness.core.trajectory import Task  # noqa: F401  (a benchmark's tasks; defined with the trajectory records)

INVALID_ACTION_FEEDBACK = "Nothing happens."
# What a benchmark that knows the truth may put in a step's info["credit_label"] (docs/credit.md): "fatal" = the
# turn that lost the episode, "detour" = a harmless mistake, "invalid" = an action outside the admissible list,
# "neutral" = a choice that could not change the outcome (every option was as good, or the episode was already
# lost), "correct" = the rest. The engine scores every method's per-turn advantages against these labels, and the
# oracle control arms (methods/oracle.py) read them.
CREDIT_LABELS = ("correct", "detour", "fatal", "invalid", "neutral")


@dataclass(frozen=True)
class TaskPanel:
    """An ordered list of tasks whose sha256 (over benchmark, split and ids) is logged by every run."""

    benchmark: str
    split: str
    tasks: tuple[Task, ...]

    @property
    def task_ids(self) -> tuple[str, ...]:
        return tuple(t.task_id for t in self.tasks)

    @property
    def sha256(self) -> str:
        blob = json.dumps({"benchmark": self.benchmark, "split": self.split, "ids": list(self.task_ids)})
        return hashlib.sha256(blob.encode()).hexdigest()

    def __len__(self) -> int:
        return len(self.tasks)


@dataclass
class Observation:
    text: str
    admissible_actions: list[str]
    info: dict = field(default_factory=dict)


@dataclass
class StepResult:
    observation: Observation
    reward: float
    done: bool
    # always present: "won" (bool), "action_valid" (bool); at episode end: "task_type", "task_score";
    # optional: "credit_label" (one of CREDIT_LABELS)
    info: dict = field(default_factory=dict)


class TextEnv(ABC):
    """One game at a time. ``step`` takes an already parsed action (see :func:`parse_action`)."""

    @abstractmethod
    def reset(self, task: Task) -> Observation: ...

    @abstractmethod
    def step(self, action: str) -> StepResult: ...

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt format as data: ``first`` for the first turn, ``with_history`` afterwards."""

    name: str
    first: str
    with_history: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(json.dumps([self.name, self.first, self.with_history]).encode()).hexdigest()

    def render(self, history_step_count: int, **fields) -> str:
        template = self.first if history_step_count == 0 else self.with_history
        return template.format(**fields)


@dataclass(frozen=True)
class ParsedAction:
    action: str
    valid: bool
    reason: str = ""  # why it is invalid, for logs


_CJK = re.compile(r"[\u4e00-\u9fff]")


def parse_action(
    text: str, think: bool = True, admissible: Sequence[str] | None = None, max_fallback_chars: int = 30
) -> ParsedAction:
    """verl-agent's projection: lower-case, the text inside ``<action>…</action>``.

    Valid iff the action tags are present (and ``<think>…</think>`` when ``think``), the output holds no CJK
    characters, and — when ``admissible`` is given — the action is one of them. An invalid output still yields
    an action string (its last 30 characters, as verl-agent does) that the env answers with "Nothing happens.".
    Never raises.
    """
    text = text if isinstance(text, str) else ""
    lowered = text.lower()
    start, end = lowered.find("<action>"), lowered.find("</action>")
    if start == -1 or end == -1 or end < start:
        return ParsedAction(lowered[-max_fallback_chars:], False, "missing <action>…</action>")
    action = lowered[start + len("<action>") : end].strip()
    if think and (lowered.find("<think>") == -1 or lowered.find("</think>") == -1):
        return ParsedAction(action, False, "missing <think>…</think>")
    if _CJK.search(text):
        return ParsedAction(action, False, "CJK characters in output")
    if not action:
        return ParsedAction(action, False, "empty action")
    if admissible is not None and not _is_admissible(action, admissible):
        return ParsedAction(action, False, "not an admissible action")
    return ParsedAction(action, True)


_PLACEHOLDER = re.compile(r"^(\w+)\[<[^<>]*>\]$")


def _is_admissible(action: str, admissible: Sequence[str]) -> bool:
    """Exact membership; an entry with a placeholder argument (WebShop's ``search[<your query>]``) admits any
    non-empty argument for its verb except the placeholder itself."""
    lowered = {a.lower() for a in admissible}
    if action in lowered:
        return not _PLACEHOLDER.match(action)
    verbs = {m.group(1) for m in map(_PLACEHOLDER.match, lowered) if m}
    verb, bracket, rest = action.partition("[")
    return bool(bracket) and verb in verbs and rest.endswith("]") and len(rest) > 1


@dataclass(frozen=True)
class TextBounds:
    """The longest texts an episode of a benchmark can show: what a teacher context copies out of an episode
    (a reference's actions, the observation that followed), so the run can size the teacher's prompt limit."""

    action: str  # the longest action a successful episode can take
    observation: str  # the longest observation a step can return


class Expert(ABC):
    """A scripted policy for demonstrations and tests: observation in, action string out."""

    @abstractmethod
    def act(self, observation: Observation) -> str: ...

    def targets(self, observation: Observation, action: str) -> list[str]:
        """The responses a warm start teaches at this observation (default: the action taken). A format expert
        lists every choice it is indifferent between, so the warm start learns them uniformly, not one at random."""
        return [action]


class Benchmark(ABC):
    """Everything the engine needs to know about one benchmark."""

    name: ClassVar[str]
    Config: ClassVar[type]  # the dataclass of the benchmark's config section (`<name>:`), defaults = the paper's
    task_types: ClassVar[tuple[str, ...]]
    max_steps: int  # actions per episode at most: the one step limit, read from the benchmark's own config
    # task type (or "default") -> the procedural hint of the `skills` teacher context (RLSD, SDAR, GRPO+OPSD)
    skills: ClassVar[dict[str, str]] = {}
    # True when every step's info carries a "credit_label" (CREDIT_LABELS): the credit scores and the oracle arms
    # need it, and a method that reads the labels is refused at start-up on a benchmark that gives none
    labels_turns: ClassVar[bool] = False
    splits: ClassVar[tuple[str, ...]] = ("train", "eval_in", "eval_out")

    def __init__(self, config, seed: int = 0, think: bool = False):
        """``think`` is the run's ``rollout.think``: the parser checks for ``<think>``, so the prompt must \
ask for it."""
        self.config = config
        self.seed = seed
        self.think = think

    @classmethod
    def preflight(cls, config) -> str | None:
        """A problem with ``config`` that can be seen before anything is built (a missing data folder), as a
        message that names the key and the fix; None when there is none."""
        return None

    @property
    @abstractmethod
    def template(self) -> PromptTemplate: ...

    @abstractmethod
    def panel(self, split: str, size: int | None = None) -> TaskPanel:
        """The frozen task panel of ``split``; ``size`` takes its first ``size`` tasks."""

    @abstractmethod
    def make_env(self) -> TextEnv: ...

    @abstractmethod
    def expert(self, task: Task) -> Expert: ...

    def demonstrator(self, task: Task) -> Expert:
        """The policy the tiny model's warm start imitates (default: the expert; a benchmark may demonstrate
        only the format and leave the decisions to RL)."""
        return self.expert(task)

    def text_bounds(self) -> TextBounds:
        """The longest action and observation of any episode (:class:`TextBounds`). This default takes them from
        the expert's episodes on up to 64 train tasks: seen, not proven; a benchmark whose texts have a known
        longest form (its vocabulary, its catalogue) overrides it with that."""
        env, actions, observations = self.make_env(), [""], [""]
        try:
            for task in self.panel("train").tasks[:64]:
                obs, expert = env.reset(task), self.expert(task)
                for _ in range(self.max_steps):
                    actions += obs.admissible_actions
                    result = env.step(expert.act(obs))
                    obs = result.observation
                    observations.append(obs.text)
                    if result.done:
                        break
        finally:
            env.close()
        return TextBounds(max(actions, key=len), max(observations, key=len))

    @classmethod
    def skill_for(cls, task_type: str) -> str:
        """The ``skills`` teacher context's hint for a task type (the table's ``"default"`` where it has none).

        A hint is one short procedural rule per task type, the kind a skill library distils from won episodes.
        It never holds a task's answer (an object's place, a product id, a door's colour), so the teacher knows
        more than the student without being handed the solution."""
        return cls.skills.get(task_type) or cls.skills.get("default", "")

    def task_description(self, task: Task, first_observation: Observation) -> str:
        """The task text shown in every prompt (defaults to the first observation)."""
        return first_observation.text

    def exact_success(self, score, tasks: Sequence[Task], history_length: int) -> list[float] | None:
        """The policy's success probability on each task, computed rather than sampled (no evaluation noise), or
        None where the benchmark cannot enumerate its states (the default). ``score(pairs)`` gives, for
        ``(prompt, action)`` pairs, the probability that the policy answers the prompt with that action, at the
        eval's sampling settings; ``history_length`` is the rollout's (the prompt may then hold past turns)."""
        return None

    @abstractmethod
    def format_prompt(self, task_text: str, history: Sequence[tuple[str, str]], observation: Observation,
                      step: int, history_length: int) -> str:
        """Render the benchmark's template. ``history`` holds (observation, action) pairs of past turns,
        ``step`` is the number of actions taken so far; only the last ``history_length`` pairs are shown."""


def _check_benchmark(name: str, cls) -> None:
    config = getattr(cls, "Config", None)
    if not (dataclasses.is_dataclass(config) and issubclass(config, Checked)):
        raise TypeError(f"benchmark {name!r}: {cls.__name__}.Config must be the dataclass of its config section, "
                        "deriving from harness.core.ranges.Checked (its ranges are checked when it is built)")
    cls.name = name


def _import_benchmarks(name: str | None) -> None:
    """Import ``envs/<name>/`` (every package under ``envs/`` when ``name`` is None): importing registers it. A
    missing package is an unknown name; an import error inside a benchmark's own code propagates."""
    names = [name] if name is not None else [m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)])
                                             if m.ispkg]
    for package in names:
        try:
            importlib.import_module(f"envs.{package}")
        except ModuleNotFoundError as err:
            if err.name != f"envs.{package}":
                raise


BENCHMARKS: Registry[type[Benchmark]] = Registry(
    "benchmark", discover=_import_benchmarks, check=_check_benchmark,
    hint="A benchmark is a package envs/<name>/ whose Benchmark subclass is decorated with "
         "@BENCHMARKS.register(\"<name>\")")

# A benchmark package whose engine needs packages of its own (textworld, bm25s ...) registers its options class here
# and its Benchmark lazily ("module:Class"), so reading a config imports every benchmark's options but only the run's
# engine: a GPU node without textworld still loads a Gates config (scripts/gpu_check.sh).
BENCHMARK_CONFIGS: Registry[type] = Registry("benchmark options", discover=_import_benchmarks)


def benchmark_config(name: str) -> type:
    """The options class (``Config``) of benchmark ``name``, without importing its engine where the package
    registered it in :data:`BENCHMARK_CONFIGS`; an unknown name is an :class:`UnknownPluginError`."""
    if name in BENCHMARK_CONFIGS:
        return BENCHMARK_CONFIGS.get(name)
    return BENCHMARKS.get(name).Config


def make_benchmark(name: str, config=None, seed: int = 0, think: bool = False) -> Benchmark:
    cls = BENCHMARKS.get(name)
    return cls(config if config is not None else cls.Config(), seed=seed, think=think)
