"""VectorEnv: same results as stepping the envs one by one; crashed, hung and raising envs are restarted and
their episodes marked failed, never killing the run."""
from __future__ import annotations

import os
import time

import pytest

from envs.base import Observation, StepResult, Task, TextEnv
from envs.vector import VectorEnv


class CounterEnv(TextEnv):
    """Wins when the action "win" is sent; special actions crash, hang or raise inside the env."""

    def reset(self, task: Task) -> Observation:
        self.task, self.steps = task, 0
        if task.task_id == "bad-reset":
            raise ValueError("cannot load this game")
        return Observation(f"start {task.task_id} pid-free", ["step", "win"], {"task_type": task.task_type})

    def step(self, action: str) -> StepResult:
        self.steps += 1
        if action == "crash":
            os._exit(3)
        if action == "hang":
            time.sleep(60)
        if action == "raise":
            raise RuntimeError("engine bug")
        won = action == "win"
        return StepResult(Observation(f"{self.task.task_id} step {self.steps} {action}", ["step", "win"]), 10.0 * won,
                          won or self.steps >= 3, {"won": won, "action_valid": action in ("step", "win"),
                                                   "task_type": self.task.task_type})


def tasks(n):
    return [Task(f"t{i}", "pick", "train") for i in range(n)]


def serial(actions_per_turn, task_list):
    envs = [CounterEnv() for _ in task_list]
    obs = [e.reset(t) for e, t in zip(envs, task_list)]
    turns = [[e.step(a) if a is not None else None for e, a in zip(envs, actions)] for actions in actions_per_turn]
    return obs, turns


@pytest.mark.parametrize("num_workers", [0, 2])
def test_matches_serial_stepping(num_workers):
    plan = [["step", "step", "win", None, "step"], ["win", "step", None, None, "step"]]
    with VectorEnv(CounterEnv, num_workers=num_workers, step_timeout_s=20) as venv:
        obs = venv.reset(tasks(5))
        got = [venv.step(actions) for actions in plan]
    want_obs, want = serial(plan, tasks(5))
    assert [o.text for o in obs] == [o.text for o in want_obs]
    for got_turn, want_turn in zip(got, want):
        assert [(r.observation.text, r.reward, r.done, r.info) if r else None for r in got_turn] == \
               [(r.observation.text, r.reward, r.done, r.info) if r else None for r in want_turn]


def test_finished_envs_return_none():
    with VectorEnv(CounterEnv, num_workers=0) as venv:
        venv.reset(tasks(2))
        assert venv.step(["win", "step"])[0].done
        second = venv.step(["step", "step"])
        assert second[0] is None and second[1] is not None


@pytest.mark.parametrize("num_workers", [0, 2])
def test_raising_env_fails_its_episode_only(num_workers):
    with VectorEnv(CounterEnv, num_workers=num_workers, step_timeout_s=20) as venv:
        obs = venv.reset([*tasks(3), Task("bad-reset", "pick", "train")])
        assert "cannot load this game" in obs[3].info["failure_reason"]
        results = venv.step(["raise", "step", "step", "step"])
        assert results[0].done and "engine bug" in results[0].info["failure_reason"]
        assert not results[0].info["won"] and results[0].info["task_type"] == "pick"
        assert results[1].info.get("failure_reason") is None and not results[1].done
        assert results[3] is None  # its reset failed: the env is finished
        assert venv.reset(tasks(4))[0].text == "start t0 pid-free"  # the env was rebuilt


def test_crashed_worker_is_restarted():
    with VectorEnv(CounterEnv, num_workers=2, step_timeout_s=20) as venv:
        venv.reset(tasks(4))
        results = venv.step(["crash", "step", "step", "step"])
        # worker 0 hosted envs 0 and 2: both episodes are lost, worker 1's go on
        assert "crashed" in results[0].info["failure_reason"] and results[0].done
        assert "crashed" in results[2].info["failure_reason"]
        assert results[1].info.get("failure_reason") is None and results[3].info.get("failure_reason") is None
        assert venv.restarts == 1
        after = venv.step(["step", "step", "step", "step"])
        assert after[0] is None and after[2] is None and after[1] is not None
        obs = venv.reset(tasks(4))
        assert all(o.info.get("failure_reason") is None for o in obs)
        assert all(r is not None and "failure_reason" not in r.info for r in venv.step(["step"] * 4))


def test_hung_worker_times_out_and_is_restarted():
    with VectorEnv(CounterEnv, num_workers=2, step_timeout_s=1.0, reset_timeout_s=60) as venv:
        venv.reset(tasks(2))
        start = time.monotonic()
        results = venv.step(["hang", "win"])
        assert time.monotonic() - start < 10
        assert "no answer within" in results[0].info["failure_reason"] and results[0].done
        assert results[1].info["won"]
        assert venv.reset(tasks(2))[0].text == "start t0 pid-free"
