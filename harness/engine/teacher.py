"""The teacher pass: q_t = log π_θ(y_t | h_t⁺) for the student's own response tokens
(methods/FORMULAS.md#teacher-contexts).

Same weights, no gradient, the same response tokens; only the prompt differs: a privileged context is placed
before the student's prompt. Three contexts exist (a method names one in ``Method.teacher``):

- ``skills``: ``"[Privileged Skill Information]\\n{skill}\\n\\n"`` with the task type's skill (RLSD, SDAR).
- ``successful_sibling``: the actions of a successful rollout of the same group, preferring another rollout
  than the row's own (SHARPO). Unavailable where the group has no success.
- ``hindsight``: the successful sibling's actions (when one exists) plus the observation that followed this
  step (StepOPSD).

Rows without a context keep ``teacher_logp = old_logp`` (δ = 0) and ``teacher_available = False``; the
methods then leave their advantage at GRPO's. Privileged prompts are left-truncated to the prompt limit, like
the student's, so a very long history can push the context out: the run logs ``teacher_truncated_frac``.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from harness.core.batch import StepBatch
from harness.engine import distributed
from harness.engine.rollout import Trajectory
from harness.engine.skills import skill_for
from harness.policy.logprobs import pad_left, response_logprobs
from harness.policy.models import chat_prompt_ids
from harness.policy.precision import Precision

SIBLING_HEADER = "Reference: a successful attempt at this task took these actions:\n"
HINDSIGHT_HEADER = "The observation that followed your action at this step:\n"


def _sibling_actions(trajs: Sequence[Trajectory]) -> dict[int, str | None]:
    """traj_id → the action text of a successful rollout of its group (another one where possible)."""
    winners: dict[int, list[Trajectory]] = {}
    for traj in trajs:
        if traj.won and traj.turns:
            winners.setdefault(traj.group_id, []).append(traj)
    chosen: dict[int, str | None] = {}
    for traj in trajs:
        pool = winners.get(traj.group_id, [])
        others = [w for w in pool if w.traj_id != traj.traj_id]
        ref = (others or pool or [None])[0]
        chosen[traj.traj_id] = "\n".join(ref.actions) if ref is not None else None
    return chosen


def skills_contexts(trajs: Sequence[Trajectory], benchmark: str) -> list[str | None]:
    return [f"[Privileged Skill Information]\n{skill_for(benchmark, traj.task.task_type)}\n\n"
            for traj in trajs for _ in traj.turns]


def sibling_contexts(trajs: Sequence[Trajectory], benchmark: str) -> list[str | None]:
    actions = _sibling_actions(trajs)
    out: list[str | None] = []
    for traj in trajs:
        text = actions[traj.traj_id]
        out.extend([f"{SIBLING_HEADER}{text}\n\n" if text is not None else None] * len(traj.turns))
    return out


def hindsight_contexts(trajs: Sequence[Trajectory], benchmark: str) -> list[str | None]:
    actions = _sibling_actions(trajs)
    out: list[str | None] = []
    for traj in trajs:
        text = actions[traj.traj_id]
        prefix = f"{SIBLING_HEADER}{text}\n\n" if text is not None else ""
        out.extend(f"{prefix}{HINDSIGHT_HEADER}{turn.next_observation}\n\n" for turn in traj.turns)
    return out


CONTEXTS: dict[str, Callable[[Sequence[Trajectory], str], list[str | None]]] = {
    "skills": skills_contexts,
    "successful_sibling": sibling_contexts,
    "hindsight": hindsight_contexts,
}


class TeacherScorer:
    """Runs the no-grad teacher forward; counts its forwards so tests can check it is skipped when unused."""

    def __init__(self, model, tokenizer, benchmark: str, max_prompt_tokens: int, micro_batch: int = 8,
                 precision: Precision | None = None):
        self.model = model
        self.precision = precision or Precision()  # the run's compute dtype, as the student's scoring
        self.tokenizer = tokenizer
        self.benchmark = benchmark
        self.max_prompt_tokens = max_prompt_tokens
        self.micro_batch = micro_batch
        self.forward_rows = 0

    def score(self, batch: StepBatch, trajs: Sequence[Trajectory], context: str,
              builder: Callable | None = None) -> tuple[StepBatch, dict[str, float]]:
        if context not in CONTEXTS and builder is None:
            raise KeyError(f"unknown teacher context {context!r}; known: {sorted(CONTEXTS)}")
        contexts = (builder or CONTEXTS[context])(trajs, self.benchmark)
        prompts = [turn.prompt for traj in trajs for turn in traj.turns]
        available = torch.tensor([c is not None for c in contexts], dtype=torch.bool)
        teacher_logp = batch.old_logp.clone() if "old_logp" in batch else torch.zeros(batch.response_ids.shape)
        rows = available.nonzero().flatten()
        truncated = 0
        if len(rows):
            ids = chat_prompt_ids(self.tokenizer, [contexts[r] + prompts[r] for r in rows.tolist()])
            truncated = sum(len(x) > self.max_prompt_tokens for x in ids)
            prompt_ids, prompt_mask = pad_left([x[-self.max_prompt_tokens:] for x in ids], self.tokenizer.pad_token_id)
            teacher_logp[rows] = self._logprobs(prompt_ids, prompt_mask, batch.response_ids[rows],
                                                batch.response_mask[rows])
            self.forward_rows += len(rows)
        metrics = {"teacher_available_frac": available.float().mean().item(),
                   "teacher_truncated_frac": truncated / max(len(rows), 1)}
        return batch.with_columns(teacher_logp=teacher_logp, teacher_available=available), metrics

    def _logprobs(self, prompt_ids, prompt_mask, response_ids, response_mask) -> torch.Tensor:
        """No-grad log-probs of the rows, float32 on the CPU. A sharded model: each rank scores its share of the
        micro-batches and all ranks get every row (as the student's scoring, harness/engine/update.py)."""
        device = next(self.model.parameters()).device

        def rows_logp(part: slice) -> torch.Tensor:
            with torch.no_grad(), self.precision.autocast():
                logp = response_logprobs(self.model, prompt_ids[part].to(device), prompt_mask[part].to(device),
                                         response_ids[part].to(device), response_mask[part].to(device),
                                         micro_batch=self.micro_batch)
            return logp.float().cpu()

        return distributed.map_micro_batches(self.model, len(prompt_ids), self.micro_batch, rows_logp)

