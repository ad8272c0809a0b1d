"""Many ``TextEnv`` games at once, in worker processes, for batched generation.

``VectorEnv(make_env, num_workers)`` hosts env ``i`` in worker ``i % num_workers``. Each ``reset`` / ``step``
sends one message per worker (all its envs' commands) and then collects, so workers run in parallel.

Failures never reach the caller as exceptions:
- an env that raises is rebuilt inside its worker; its episode ends with ``info["failure_reason"]``;
- a worker that dies or does not answer within ``step_timeout_s`` (``reset_timeout_s`` for a reset) per env
  is killed and restarted, and every episode it hosted ends with ``info["failure_reason"]``.
A failed reset gives an ``Observation`` with ``info["failure_reason"]``; that env is then finished.
``num_workers=0`` runs the envs in this process (same interface, no timeout), for tests and debugging.
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import traceback
from typing import Callable, Sequence

from envs.base import Observation, StepResult, Task, TextEnv


def _failed_step(reason: str, task: Task | None) -> StepResult:
    info = {"won": False, "action_valid": False, "task_score": 0.0, "failure_reason": reason}
    if task is not None:
        info["task_type"] = task.task_type
    return StepResult(Observation("", [], {"failure_reason": reason}), 0.0, True, info)


def _failed_reset(reason: str) -> Observation:
    return Observation("", [], {"failure_reason": reason})


class _EnvSlots:
    """The envs of one worker, by slot; an env that raises is replaced by a fresh one."""

    def __init__(self, make_env: Callable[[], TextEnv]):
        self.make_env = make_env
        self.envs: dict[int, TextEnv] = {}

    def run(self, command: str, slot: int, arg):
        try:
            env = self.envs.get(slot) or self.envs.setdefault(slot, self.make_env())
            return "ok", (env.reset(arg) if command == "reset" else env.step(arg))
        except Exception as exc:  # noqa: BLE001 - any env error becomes a failed episode
            self.envs.pop(slot, None)
            return "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"


def _worker_main(conn, make_env) -> None:
    # a scheduler's early-warning signal goes to every process of the job: the trainer decides when to stop
    # (harness/engine/interrupt.py), its envs must stay up until it does
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    slots = _EnvSlots(make_env)
    while True:
        try:
            message = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if message is None:
            for env in slots.envs.values():
                env.close()
            return
        command, items = message
        conn.send([slots.run(command, slot, arg) for slot, arg in items])


class _Worker:
    def __init__(self, ctx, make_env):
        self.ctx, self.make_env = ctx, make_env
        self.start()

    def start(self) -> None:
        self.conn, child = self.ctx.Pipe()
        self.process = self.ctx.Process(target=_worker_main, args=(child, self.make_env), daemon=True)
        self.process.start()
        child.close()

    def restart(self) -> None:
        self.kill()
        self.start()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class VectorEnv:
    def __init__(self, make_env: Callable[[], TextEnv], num_workers: int = 4, step_timeout_s: float = 120.0,
                 reset_timeout_s: float = 600.0, start_method: str = "spawn"):
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0 (0 = in this process), got {num_workers}")
        self.make_env = make_env
        self.num_workers = num_workers
        self.step_timeout_s = step_timeout_s
        # a reset may start a worker process and build a game (ALFWorld plans a new game once): a longer budget
        self.reset_timeout_s = reset_timeout_s
        self._local = _EnvSlots(make_env) if num_workers == 0 else None
        ctx = mp.get_context(start_method)
        self._workers = [_Worker(ctx, make_env) for _ in range(num_workers)]
        self._tasks: list[Task | None] = []
        self._done: list[bool] = []
        self.restarts = 0

    def reset(self, tasks: Sequence[Task]) -> list[Observation]:
        self._tasks, self._done = list(tasks), [False] * len(tasks)
        replies = self._dispatch("reset", {i: t for i, t in enumerate(tasks)})
        observations = []
        for i in range(len(tasks)):
            status, value = replies[i]
            if status != "ok":
                self._done[i] = True
                value = _failed_reset(value)
            observations.append(value)
        return observations

    def step(self, actions: Sequence[str | None]) -> list[StepResult | None]:
        if len(actions) != len(self._tasks):
            raise ValueError(f"step got {len(actions)} actions for {len(self._tasks)} envs")
        todo = {i: a for i, a in enumerate(actions) if a is not None and not self._done[i]}
        replies = self._dispatch("step", todo)
        results: list[StepResult | None] = [None] * len(actions)
        for i in todo:
            status, value = replies[i]
            result = value if status == "ok" else _failed_step(value, self._tasks[i])
            self._done[i] = self._done[i] or result.done
            results[i] = result
        return results

    def _dispatch(self, command: str, items: dict[int, object]) -> dict[int, tuple[str, object]]:
        if self._local is not None:
            return {i: self._local.run(command, i, arg) for i, arg in items.items()}
        per_worker: dict[int, list[tuple[int, object]]] = {}
        for i, arg in items.items():
            per_worker.setdefault(i % self.num_workers, []).append((i, arg))
        replies: dict[int, tuple[str, object]] = {}
        sent = {}
        for w, batch in per_worker.items():
            try:
                self._workers[w].conn.send((command, batch))
                sent[w] = batch
            except (BrokenPipeError, OSError) as exc:
                self._fail_worker(w, batch, f"worker {w} unreachable ({type(exc).__name__}); restarted", replies)
        timeout = self.reset_timeout_s if command == "reset" else self.step_timeout_s
        for w, batch in sent.items():
            self._collect(w, batch, replies, timeout * len(batch))
        return replies

    def _collect(self, w: int, batch: list[tuple[int, object]], replies: dict, timeout: float) -> None:
        worker = self._workers[w]
        try:
            if not worker.conn.poll(timeout):
                raise TimeoutError(f"worker {w} gave no answer within {timeout:.0f} s (hung env); restarted")
            answers = worker.conn.recv()
        except (EOFError, OSError, TimeoutError) as exc:
            reason = (str(exc) if isinstance(exc, TimeoutError)
                      else f"worker {w} crashed ({type(exc).__name__}); restarted")
            self._fail_worker(w, batch, reason, replies)
            return
        for (i, _), answer in zip(batch, answers):
            replies[i] = answer

    def _fail_worker(self, w: int, batch, reason: str, replies: dict) -> None:
        """Restart worker ``w``; every episode it hosted is over (its envs are gone)."""
        self._workers[w].restart()
        self.restarts += 1
        for i, _ in batch:
            replies[i] = ("error", reason)
        for i in range(w, len(self._tasks), self.num_workers):
            self._done[i] = True

    def close(self) -> None:
        if self._local is not None:
            for env in self._local.envs.values():
                env.close()
        for worker in self._workers:
            try:
                worker.conn.send(None)
                worker.process.join(timeout=5)
            except (BrokenPipeError, OSError):
                pass
            worker.kill()
        self._workers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
