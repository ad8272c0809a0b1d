"""Room for the teacher's privileged context, checked before a run starts (no silent truncation).

A teacher prompt is the context followed by the student's prompt, and keeps at most ``rollout.max_prompt_tokens +
rollout.teacher_context_tokens`` tokens. The worst-case context is built by the very builders of the teacher pass
(harness/engine/teacher.py) from the benchmark's longest texts (``Benchmark.text_bounds``): the skills context
with the longest skill text; the sibling list with ``max_steps`` of the longest action; hindsight with that list
and the longest observation. Its length is counted with the run's tokenizer when one is on this machine, else at
one token per UTF-8 byte, an upper bound for the byte-level BPE tokenizers used here (Qwen2, SmolLM2, the tiny
model's). A run whose budget is smaller refuses to start, naming the key and the value it needs.
"""
from __future__ import annotations

from envs.base import Benchmark, Task
from harness.core.registry import TEACHER_CONTEXTS
from harness.core.typed import ConfigError
from harness.engine.rollout import Trajectory, Turn

BOUNDARY_TOKENS = 2  # the context's last token may merge with the prompt's first: counted apart, allow for it


def worst_case_context(benchmark: Benchmark, teacher: str) -> str:
    """The longest context text the ``teacher`` context can give a row of ``benchmark``."""
    bounds = benchmark.text_bounds()
    steps = max(int(benchmark.max_steps), 1)

    def trajectory(traj_id: int, task_type: str, turns: int) -> Trajectory:
        turn = Turn(prompt="", prompt_ids=[], response_ids=[], rollout_logp=[], response_text="",
                    action=bounds.action, action_valid=True, observation="", next_observation=bounds.observation,
                    reward=0.0)
        return Trajectory(Task(f"bound-{traj_id}", task_type, "train"), group_id=0, traj_id=traj_id,
                          turns=[turn] * turns, won=True)

    types = list(benchmark.task_types) or ["default"]
    trajs = [trajectory(i, task_type, steps) for i, task_type in enumerate(types + types[:1])]  # >= 2 winners
    return max((c for c in TEACHER_CONTEXTS.get(teacher)(trajs, benchmark.name) if c is not None), key=len, default="")


def count_tokens(text: str, tokenizer=None) -> tuple[int, str]:
    """(tokens, how they were counted): exactly with ``tokenizer``, else one per UTF-8 byte (an upper bound)."""
    if tokenizer is not None:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"]) + BOUNDARY_TOKENS, "the run's tokenizer"
    return len(text.encode("utf-8")), "one token per byte, an upper bound (the tokenizer is not on this machine yet)"


def context_tokens_needed(benchmark: Benchmark, teacher: str, tokenizer=None) -> tuple[int, str]:
    """(tokens the worst-case ``teacher`` context takes, how they were counted)."""
    return count_tokens(worst_case_context(benchmark, teacher), tokenizer)


def check_teacher_budget(cfg, benchmark: Benchmark, teacher: str | None, tokenizer=None) -> int | None:
    """Raise :class:`ConfigError` when ``rollout.teacher_context_tokens`` cannot hold the worst-case context of
    ``teacher`` on ``benchmark``; returns the tokens needed (None when the method has no teacher, or the
    benchmark cannot bound its texts before the run)."""
    if teacher is None:
        return None
    try:
        needed, how = context_tokens_needed(benchmark, teacher, tokenizer)
    except NotImplementedError:
        return None  # e.g. a remote site: teacher/truncated_frac reports what the run meets
    budget = cfg.rollout.teacher_context_tokens
    if needed > budget:
        raise ConfigError(
            f"rollout.teacher_context_tokens={budget} is too small for the {teacher!r} teacher context on "
            f"{benchmark.name}: its worst case ({benchmark.max_steps} steps; docs/teacher-premise.md) takes {needed} "
            f"tokens ({how}), and a teacher prompt keeps at most rollout.max_prompt_tokens + "
            f"rollout.teacher_context_tokens tokens; pass rollout.teacher_context_tokens={needed} or more")
    return needed


def check_before_weights(cfg, benchmark: Benchmark, teacher: str | None) -> bool:
    """The start-up check before any weight loads: with the model folder's tokenizer when it is on this machine,
    else with the byte bound. Returns False when only the tokenizer can settle it (a tiny model not built yet
    whose byte bound exceeds the budget): the run then checks again once its tokenizer exists."""
    from harness.policy.source import local_tokenizer

    tokenizer = local_tokenizer(cfg)
    try:
        check_teacher_budget(cfg, benchmark, teacher, tokenizer)
    except ConfigError:
        if tokenizer is not None or cfg.model.source != "tiny":
            raise
        return False
    return True
