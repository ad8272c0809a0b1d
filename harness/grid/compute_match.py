"""The compute-matched GRPO arm (``grid.compute_matched: true``): GRPO given the compute of the grid's costliest
method, so that a method's gain over GRPO can be told apart from a gain that more compute alone would buy.

**Cost of one RL step, counted** from the run's resolved config and the method's ``teacher`` declaration (no method
is named here), in forward-pass token positions per rollout row — every arm collects the same number of rows per
rollout on average, so rows cancel in a ratio and only the per-row count matters:

- generation: P + R (the prompt prefilled, one position per generated token);
- old log-probs, recomputed by the training model before the update: P + R;
- the KL reference's log-probs, when ``train.kl_coef > 0``: P + R;
- the teacher's no-grad pass, when the method declares a ``teacher``: P + C + R, the privileged prompt holding up to
  C = ``rollout.teacher_context_tokens`` more tokens (0 where the profile has no such key);
- the update: ``ppo_epochs`` × (3 + ``gradient_checkpointing``) × (P + R): a backward pass costs about two forwards
  (Kaplan et al. 2020, arXiv 2001.08361: 6N FLOPs a trained token against 2N a forward one) and checkpointing
  recomputes the forward once more;

with P = ``rollout.max_prompt_tokens`` and R = ``rollout.max_response_tokens``, the limits a row is sized to. A run
costs that times the rows of a step (∝ ``tasks_per_step`` × ``group_size``) times ``train.steps``. Wall time is
not the measure: it depends on the machine (the cpu grid's teacher pass took a larger share of a step than its
FLOPs do); the cost table (paper_figures/tables.py) reports the measured seconds beside the runs.

**Which knob.** The arm gets more rollouts per group (``rollout.group_size``): it keeps the tasks, the number of
steps, the evaluation schedule and the learning-curve axis of every other arm, and spends the compute where GRPO
itself would, on a better-estimated group baseline and fewer all-equal groups. Only when no whole group size comes
within 5% of the target (small groups: G = 2 can only jump by 50%) are the steps scaled as well.
"""
from __future__ import annotations

from typing import Any

COMPUTE_MATCHED = "grpo_compute_matched"
DISPLAY = "GRPO, compute-matched"
GROUP_TOLERANCE = 0.05  # a group size this close to the target needs no change of steps


def step_cost(cfg: Any, teacher: str | None) -> float:
    """Forward-pass token positions per rollout row of one RL step (the module docstring's count)."""
    r = cfg.rollout
    row = r.max_prompt_tokens + r.max_response_tokens
    cost = 2 * row  # generation + the old log-probs
    if cfg.train.kl_coef > 0:
        cost += row
    if teacher is not None:
        cost += row + getattr(r, "teacher_context_tokens", 0)
    cost += cfg.train.ppo_epochs * (3 + int(cfg.model.gradient_checkpointing)) * row
    return float(cost)


def run_cost(cfg: Any, teacher: str | None) -> float:
    """Cost of a whole run: per-row step cost × rows per step (up to the mean rollout length) × steps."""
    return step_cost(cfg, teacher) * cfg.rollout.tasks_per_step * cfg.rollout.group_size * cfg.train.steps


def arm_run_cost(profile_path, override_items: list[str]) -> float:
    """The counted cost of one arm of the grid, from its resolved config (``RunSpec.override_items()``)."""
    from harness.config import load_config
    from harness.core import registry

    cfg = load_config(profile_path, override_items)
    return run_cost(cfg, registry.get(cfg.method.name).teacher)


def plan(profile_path, benchmark: str, arms: list[list[str]]) -> tuple[str, ...] | None:
    """Overrides that give GRPO the run cost of the costliest of ``arms`` (each its override items) on
    ``benchmark``; None when GRPO is already the costliest (the arm would be GRPO itself)."""
    from harness.config import load_config

    target = max(arm_run_cost(profile_path, items) for items in arms)
    cfg = load_config(profile_path, [f"benchmark={benchmark}", "method=grpo"])
    grpo = run_cost(cfg, None)
    if target <= grpo * (1 + 1e-9):
        return None
    group = max(cfg.rollout.group_size, round(cfg.rollout.group_size * target / grpo))
    steps = cfg.train.steps
    planned = grpo * group / cfg.rollout.group_size
    if abs(planned - target) > GROUP_TOLERANCE * target:
        steps = max(1, round(steps * target / planned))
    extra = [f"rollout.group_size={group}"]
    if steps != cfg.train.steps:
        extra.append(f"train.steps={steps}")
    return (*extra, f"run_label={COMPUTE_MATCHED}")
