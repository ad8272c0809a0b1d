"""The compute-matched GRPO arm (``grid.compute_matched: true``): GRPO given the compute of the grid's costliest
method, so that a method's gain over GRPO can be told apart from a gain that more compute alone would buy.

**Cost of one RL step, counted** in forward-pass token positions (harness/engine/cost.py, the count the trainer
logs each step as ``cost/tokens``) from the run's resolved config, the method's ``teacher`` declaration (no method
is named here) and a **token basis**: the tokens a rollout row holds for the student (prompt + response) and, per
teacher context, the tokens the teacher pass reads per row (privileged prompt + response, 0 on rows without a
context). The basis is

- measured, where the profile names one (``grid.compute_basis``: a JSON written by ``python -m
  paper_figures.compute_basis`` from the ``train/tokens``, ``train/rows`` and ``cost/teacher_tokens`` that runs
  logged): the tokens the methods actually process;
- otherwise the token budgets, an upper bound: ``rollout.max_prompt_tokens + rollout.max_response_tokens`` a row,
  + ``rollout.teacher_context_tokens`` for the teacher.

Every arm is assumed to collect as many rows a rollout as GRPO. A run costs the per-row count times the rows of a
step (∝ ``tasks_per_step`` × ``group_size``) times ``train.steps``. The cost table (paper_figures/tables.py)
prints the planned ratio to GRPO beside the measured token and step-time ratios.

**Which knob.** The arm gets more rollouts per group (``rollout.group_size``): it keeps the tasks, the number of
steps, the evaluation schedule and the learning-curve axis of every other arm, and spends the compute where GRPO
itself would, on a better-estimated group baseline and fewer all-equal groups. ``train.ppo_mini_batch`` grows
with the group, so the arm takes as many optimizer steps a step as GRPO: it gets more data, not more Adam steps.
Only when no whole group size comes within 5% of the target (small groups: G = 2 can only jump by 50%) are the
steps scaled as well.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.typed import ConfigError
from harness.engine.cost import step_positions

COMPUTE_MATCHED = "grpo_compute_matched"
DISPLAY = "GRPO, compute-matched"
GROUP_TOLERANCE = 0.05  # a group size this close to the target needs no change of steps


@dataclass(frozen=True)
class TokenBasis:
    """Tokens per rollout row: the student's (prompt + response) and the teacher pass's, per teacher context."""

    student: float
    teacher: dict[str, float]
    source: str  # "budgets", or the measured basis file

    def teacher_tokens(self, context: str | None, method: str = "") -> float:
        if context is None:
            return 0.0
        if context not in self.teacher:
            raise ConfigError(f"compute basis {self.source} has no measurement for teacher context {context!r} "
                              f"(method {method}): measure it with python -m paper_figures.compute_basis on runs "
                              f"of a method that uses it, or unset grid.compute_basis to plan from the budgets")
        return self.teacher[context]


def budget_basis(cfg: Any) -> TokenBasis:
    """The token budgets a row is sized to: an upper bound of what it holds."""
    from harness.core.registry import TEACHER_CONTEXTS

    r = cfg.rollout
    row = r.max_prompt_tokens + r.max_response_tokens
    context = getattr(r, "teacher_context_tokens", 0)
    return TokenBasis(float(row), {name: float(row + context) for name in TEACHER_CONTEXTS.available()}, "budgets")


def load_basis(path: str | Path) -> TokenBasis:
    """A measured basis (``python -m paper_figures.compute_basis``)."""
    try:
        raw = json.loads(Path(path).read_text())
        return TokenBasis(float(raw["student_tokens_per_row"]),
                          {k: float(v) for k, v in raw["teacher_tokens_per_row"].items()}, str(path))
    except FileNotFoundError:
        raise ConfigError(f"grid.compute_basis: {path} does not exist; write it with python -m "
                          f"paper_figures.compute_basis --runs <runs folder> --out {path}, or unset the key") from None
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as err:
        raise ConfigError(f"grid.compute_basis: {path} is not a token basis ({err}); rewrite it with python -m "
                          f"paper_figures.compute_basis") from None


def step_cost(cfg: Any, teacher: str | None, basis: TokenBasis | None = None, method: str = "") -> float:
    """Forward-pass token positions per rollout row of one RL step (harness/engine/cost.py)."""
    basis = basis or budget_basis(cfg)
    return step_positions(cfg, basis.student, basis.teacher_tokens(teacher, method))


def step_total(cfg: Any, teacher: str | None, basis: TokenBasis | None = None) -> float:
    """Counted cost of one RL step: per-row cost × rows a step (tasks × group, up to the mean rollout length)."""
    return step_cost(cfg, teacher, basis, cfg.method.name) * cfg.rollout.tasks_per_step * cfg.rollout.group_size


def run_cost(cfg: Any, teacher: str | None, basis: TokenBasis | None = None) -> float:
    """Counted cost of a whole run: :func:`step_total` × steps."""
    return step_total(cfg, teacher, basis) * cfg.train.steps


def arm_costs(profile_path, override_items: list[str], basis: TokenBasis | None = None) -> tuple[float, float]:
    """(step cost, run cost) of one arm of the grid, from its resolved config (``RunSpec.override_items()``)."""
    from harness.config import load_config
    from harness.core import registry

    cfg = load_config(profile_path, override_items)
    step = step_total(cfg, registry.get(cfg.method.name).teacher, basis)
    return step, step * cfg.train.steps


def arm_run_cost(profile_path, override_items: list[str], basis: TokenBasis | None = None) -> float:
    """The counted cost of one arm's whole run."""
    return arm_costs(profile_path, override_items, basis)[1]


def plan(profile_path, benchmark: str, arms: list[list[str]], basis_path: str | None = None) -> tuple[str, ...] | None:
    """Overrides that give GRPO the run cost of the costliest of ``arms`` (each its override items) on
    ``benchmark``, with as many optimizer steps a step as GRPO; None when GRPO is already the costliest.
    ``basis_path``: the profile's ``grid.compute_basis`` (None: the token budgets)."""
    from harness.config import load_config

    basis = load_basis(basis_path) if basis_path else None
    target = max(arm_run_cost(profile_path, items, basis) for items in arms)
    cfg = load_config(profile_path, [f"benchmark={benchmark}", "method=grpo"])
    grpo = run_cost(cfg, None, basis)
    if target <= grpo * (1 + 1e-9):
        return None
    group = max(cfg.rollout.group_size, round(cfg.rollout.group_size * target / grpo))
    steps = cfg.train.steps
    planned = grpo * group / cfg.rollout.group_size
    if abs(planned - target) > GROUP_TOLERANCE * target:
        steps = max(1, round(steps * target / planned))
    mini_batch = round(cfg.train.ppo_mini_batch * group / cfg.rollout.group_size)
    extra = [f"rollout.group_size={group}", f"train.ppo_mini_batch={mini_batch}"]
    if steps != cfg.train.steps:
        extra.append(f"train.steps={steps}")
    return (*extra, f"run_label={COMPUTE_MATCHED}")
