"""The teacher pass: q_t = log π_θ(y_t | h_t⁺) for the student's own response tokens
(methods/FORMULAS.md#teacher-contexts).

Same weights, no gradient, the same response tokens; only the prompt differs: a privileged context is placed
before the student's prompt. Three contexts exist (harness/teacher_contexts.py; a method names one in
``Method.teacher``):

- ``skills``: ``"[Privileged Skill Information]\\n{skill}\\n\\n"`` with the task type's skill (RLSD, SDAR).
- ``successful_sibling``: the actions of a successful rollout of the same group, preferring another rollout
  than the row's own (SHARPO). Unavailable where the group has no success.
- ``hindsight``: the successful sibling's actions (when one exists) plus the observation that followed this
  step (StepOPSD).

Rows without a context keep ``teacher_logp = old_logp`` (δ = 0) and ``teacher_available = False``; the
methods then leave their advantage at GRPO's. A privileged prompt gets its own limit, ``rollout.max_prompt_tokens
+ rollout.teacher_context_tokens``: the run refuses to start when the benchmark's worst-case context does not fit
(harness/engine/teacher_budget.py), and ``teacher/truncated_frac`` counts the rows cut from the left anyway.

Every step also logs whether the teacher knows more than the student (:func:`premise_metrics`, no ground truth
needed): a context that informs raises the log-probability of the responses that won more than of those that lost.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.registry import TEACHER_CONTEXTS
from harness.core.trajectory import Trajectory
from harness.engine import distributed
from harness.policy.logprobs import pad_left, response_logprobs
from harness.policy.precision import Precision
from harness.policy.tokenizer import chat_prompt_ids


def premise_metrics(teacher_logp: Tensor, old_logp: Tensor, response_mask: Tensor, available: Tensor,
                    success: Tensor, truncated: int = 0) -> dict[str, float]:
    """The teacher's premise, per step, from the batch alone: δ = log π_T − log π_S per response token.

    ``gap_success`` / ``gap_failure``: mean δ per token over the context rows of won / lost rollouts (NaN where
    there is none); ``better_frac``: share of context rows whose mean δ is > 0; ``available_frac``: share of rows
    with a context; ``truncated_frac``: share of context rows whose privileged prompt was cut."""
    mask = response_mask.bool() & available.bool()[:, None]
    delta = torch.where(mask, teacher_logp.double() - old_logp.double(), 0.0)  # padding may hold NaN
    tokens = mask.sum(1)
    row_sum = delta.sum(1)

    def token_mean(rows: Tensor) -> float:
        count = tokens[rows].sum()
        return float(row_sum[rows].sum() / count) if count > 0 else float("nan")

    has = tokens > 0
    won = success.bool()
    return {"teacher/gap_success": token_mean(has & won), "teacher/gap_failure": token_mean(has & ~won),
            "teacher/better_frac": float((row_sum[has] > 0).double().mean()) if has.any() else float("nan"),
            "teacher/available_frac": float(available.double().mean()) if len(available) else 0.0,
            "teacher/truncated_frac": truncated / max(int(available.sum()), 1)}


class PremiseMonitor:
    """Means of ``teacher/gap_success`` and ``teacher/gap_failure`` over the steps so far; :meth:`update` returns
    a warning when the teacher is not better on successes than on failures (once each time it turns so)."""

    def __init__(self):
        self.sums = {"teacher/gap_success": [0.0, 0], "teacher/gap_failure": [0.0, 0]}
        self.warned = False

    def update(self, metrics: dict[str, float]) -> str | None:
        for name, acc in self.sums.items():
            value = metrics.get(name, float("nan"))
            if value == value:  # NaN: no such rows this step
                acc[0] += value
                acc[1] += 1
        (won, n_won), (lost, n_lost) = self.sums.values()
        if not (n_won and n_lost):
            return None
        uninformative = won / n_won <= lost / n_lost
        message = None
        if uninformative and not self.warned:
            message = (f"warning: teacher uninformative so far: mean teacher/gap_success {won / n_won:+.3f} <= "
                       f"teacher/gap_failure {lost / n_lost:+.3f} nats a token over {max(n_won, n_lost)} steps; the "
                       f"privileged context does not favour the responses that won (docs/teacher-premise.md)")
        self.warned = uninformative
        return message


class TeacherScorer:
    """Runs the no-grad teacher forward; counts its forwards so tests can check it is skipped when unused.
    A privileged prompt keeps at most ``max_prompt_tokens + context_tokens`` tokens."""

    def __init__(self, model, tokenizer, benchmark: str, max_prompt_tokens: int, micro_batch: int = 8,
                 precision: Precision | None = None, context_tokens: int = 0):
        self.model = model
        self.precision = precision or Precision()  # the run's compute dtype, as the student's scoring
        self.tokenizer = tokenizer
        self.benchmark = benchmark
        self.limit = max_prompt_tokens + context_tokens
        self.micro_batch = micro_batch
        self.forward_rows = 0
        self.monitor = PremiseMonitor()

    def score(self, batch: StepBatch, trajs: Sequence[Trajectory], context: str,
              builder: Callable | None = None) -> tuple[StepBatch, dict[str, float]]:
        """The batch with ``teacher_logp`` and ``teacher_available``, and the ``teacher/*`` premise metrics."""
        contexts = (builder or TEACHER_CONTEXTS.get(context))(trajs, self.benchmark)
        prompts = [turn.prompt for traj in trajs for turn in traj.turns]
        available = torch.tensor([c is not None for c in contexts], dtype=torch.bool)
        teacher_logp = batch.old_logp.clone() if "old_logp" in batch else torch.zeros(batch.response_ids.shape)
        rows = available.nonzero().flatten()
        truncated, tokens = 0, 0
        if len(rows):
            ids = chat_prompt_ids(self.tokenizer, [contexts[r] + prompts[r] for r in rows.tolist()])
            truncated = sum(len(x) > self.limit for x in ids)
            prompt_ids, prompt_mask = pad_left([x[-self.limit:] for x in ids], self.tokenizer.pad_token_id)
            tokens = int(prompt_mask.sum() + batch.response_mask[rows].sum())
            teacher_logp[rows] = self._logprobs(prompt_ids, prompt_mask, batch.response_ids[rows],
                                                batch.response_mask[rows])
            self.forward_rows += len(rows)
        metrics = premise_metrics(teacher_logp, teacher_logp if "old_logp" not in batch else batch.old_logp,
                                  batch.response_mask, available, batch.success, truncated)
        metrics["cost/teacher_tokens"] = tokens  # what the pass read: the compute-matched arm's basis (engine/cost.py)
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

