"""Environment failures are infrastructure events, not outcomes (docs/recovery.md).

An episode that a crashed, hung or raising environment ended (``Trajectory.failure_reason``, set by
``harness.engine.rollout`` from ``envs.vector``) says nothing about the policy. Its turns therefore leave the step
batch before ``method.advantages``: they get no advantage, no KL or auxiliary term, and their group's statistics
(mean, std, success share, siblings) are taken over the group's other episodes only. The engine does this for every
method alike; no method sees a failed turn. Training and evaluation metrics count such an episode as failed, not
as lost: outcome rates are over the episodes that ran to their end, ``env_failure_frac`` is over all of them.
"""
from __future__ import annotations

from typing import Sequence


class EnvFailureError(RuntimeError):
    """More than ``rollout.max_failure_frac`` of a step's episodes ended in an env failure."""


def failed(trajs: Sequence) -> list:
    return [t for t in trajs if t.failure_reason is not None]


def completed(trajs: Sequence) -> list:
    """The episodes that ran to their end (won, lost or truncated): the ones a method learns from."""
    return [t for t in trajs if t.failure_reason is None]


def check_share(trajs: Sequence, max_frac: float, step: int) -> None:
    """Stop the run when too many episodes failed: the environment, not the policy, is broken then."""
    bad = failed(trajs)
    if not trajs or len(bad) / len(trajs) <= max_frac:
        return
    raise EnvFailureError(
        f"step {step}: {len(bad)} of {len(trajs)} episodes ended in an environment failure, more than "
        f"rollout.max_failure_frac={max_frac}. The environment is broken, not the policy; its last failure "
        f"(episode {bad[-1].traj_id}, task {bad[-1].task.task_id}):\n{last_traceback(bad)}")


def last_traceback(bad: Sequence) -> str:
    """The last failure that carries a worker's traceback, else the last failure reason (a crash or a hang)."""
    with_trace = [t.failure_reason for t in bad if "Traceback" in t.failure_reason]
    return (with_trace or [bad[-1].failure_reason])[-1]
