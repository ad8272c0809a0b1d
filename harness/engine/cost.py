"""The compute of one RL step, counted in forward-pass token positions — the one count that both the trainer's
``cost/tokens`` metric (what a step processed) and the compute-matched arm's plan (harness/grid/compute_match.py,
what a step is expected to process) use, so that planned and measured costs can be compared.

For a batch whose rows hold ``student`` tokens in all (prompt + response) and whose teacher pass reads
``teacher`` tokens in all (privileged prompt + response, over the rows that have a context):

- generation: ``student`` (the prompt prefilled, one position per generated token);
- old log-probs, recomputed by the training model before the update: ``student``;
- the KL reference's log-probs, when ``train.kl_coef > 0`` and the weights train: ``student``;
- the teacher's no-grad pass: ``teacher``;
- the update, when the weights train: ``ppo_epochs`` × (3 + ``gradient_checkpointing``) × ``student``: a backward
  pass costs about two forwards (Kaplan et al. 2020, arXiv 2001.08361: 6N FLOPs a trained token against 2N a
  forward one) and checkpointing recomputes the forward once more.

Attention's quadratic term is left out (at these lengths the matrix products dominate), and so is padding.
"""
from __future__ import annotations

from typing import Any


def student_passes(cfg: Any) -> float:
    """Forward-pass equivalents over the student's tokens in one step (generation, scoring, reference, update)."""
    if not cfg.train.updates_weights:  # the frozen control generates and scores, nothing more
        return 2.0
    reference = 1 if cfg.train.kl_coef > 0 else 0
    return float(2 + reference + cfg.train.ppo_epochs * (3 + int(cfg.model.gradient_checkpointing)))


def step_positions(cfg: Any, student: float, teacher: float) -> float:
    """Token positions one step processes: ``student`` × :func:`student_passes` + ``teacher``."""
    return student_passes(cfg) * student + teacher
