"""Stopping on a scheduler's signal with a checkpoint at the step reached (docs/recovery.md).

SIGTERM (a SLURM time limit or preemption, ``scancel``, snakemake's interrupt) and SIGUSR1 (an early warning, e.g.
``sbatch --signal=B:USR1@600`` in a batch script that ``exec``s the trainer) ask the run to stop. The first signal:

* while the step in flight has not touched the trained state yet (evaluation, rollouts, scoring, advantages) the
  step is abandoned at once (:class:`StepAbandoned` is raised from the handler): every draw of a step is seeded
  from (master seed, step), so the resumed run redoes it exactly;
* while the update changes the weights (PPO mini-batches, the weight sync, logging the step) it only sets a flag:
  the step finishes, is logged, and the loop stops at the step boundary.

The loop then writes a checkpoint at the step reached (every rank; :func:`harness.engine.checkpoint.save`, which
writes a temporary file and renames it), marks the MLflow run KILLED and the process exits with
:data:`EXIT_REQUEUE`. A second signal only sets the flag again, so it can never cut the save short. In a
distributed run a rank never abandons alone: the ranks agree on the flag at each step boundary
(:func:`harness.engine.distributed.any_rank`) and stop together.
"""
from __future__ import annotations

import signal
from contextlib import contextmanager

EXIT_REQUEUE = 75  # sysexits.h EX_TEMPFAIL: "temporary failure; the user is invited to retry" (same command, --resume)
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class StepAbandoned(BaseException):
    """The step in flight was dropped on a stop signal before it changed anything trained (a BaseException, so
    that no ``except Exception`` on the way swallows it)."""


class Interrupted(RuntimeError):
    """The run stopped on a signal after saving its checkpoint; ``python -m harness train`` exits
    :data:`EXIT_REQUEUE`."""

    def __init__(self, signum: int, next_step: int):
        self.signum, self.next_step = signum, next_step
        super().__init__(f"stopped by {signal.Signals(signum).name}: checkpoint saved at step {next_step}; run the "
                         f"same command with --resume to continue from it")


class StopRequest:
    """The stop flag a signal sets; :meth:`install` makes the handlers current, :meth:`uninstall` restores."""

    def __init__(self, abandon: bool = True):
        self.signum: int | None = None
        self.abandon = abandon  # False in a distributed run: ranks stop together at a step boundary
        self._abandonable = False
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def install(self) -> "StopRequest":
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _on_signal(self, signum, frame) -> None:
        first = self.signum is None
        if first:
            self.signum = signum
        if first and self._abandonable:
            self._abandonable = False
            raise StepAbandoned(signum)

    @contextmanager
    def abandonable(self):
        """The part of a step that changes nothing trained: a signal in here drops the step at once."""
        if self.requested and self.abandon:
            raise StepAbandoned(self.signum)
        self._abandonable = self.abandon
        try:
            yield
        finally:
            self._abandonable = False


NO_STOP = StopRequest(abandon=False)  # never installed: a run trained from Python (tests) keeps the old behaviour
