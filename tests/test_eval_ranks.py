"""Evaluation under FSDP is split over the ranks (harness/engine/evaluate.py → distributed.collect), as the training
rollouts are: each rank rolls out its contiguous share of the eval panel on its own engine, every rank gets all the
episodes in the panel's order, and one process samples exactly as before (the first share keeps the step's seed).
Shown without torchrun: a stand-in accelerator says which rank this is and what the other rank sent."""
from __future__ import annotations

from types import SimpleNamespace

from harness.engine import distributed, evaluate, rollout

TASKS = [SimpleNamespace(task_id=f"t{i}") for i in range(5)]


def _rank(monkeypatch, rank: int, world: int, other_ranks: dict[int, list]):
    """Run ``evaluate._episodes`` as ``rank`` of ``world``; returns (its result, the rollouts it made itself)."""
    made = []

    def fake_collect(backend, benchmark, envs, tasks, *, seed, **kwargs):
        made.append(([t.task_id for t in tasks], seed, kwargs["group_size"]))
        return [SimpleNamespace(task=t, group_id=i, traj_id=i, seed=seed) for i, t in enumerate(tasks)]

    def gather(accelerator, local):  # what every rank sends, rank order
        return [local if r == rank else other_ranks[r] for r in range(world)]

    monkeypatch.setattr(rollout, "collect", fake_collect)
    monkeypatch.setattr(distributed, "gather_objects", gather)
    ctx = SimpleNamespace(accelerator=SimpleNamespace(num_processes=world, process_index=rank,
                                                      is_main_process=rank == 0),
                          backend=SimpleNamespace(), benchmark=None, envs=None, max_env_steps=5,
                          cfg=SimpleNamespace(rollout=None, eval=SimpleNamespace(temperature=0.4)))
    return evaluate._episodes(ctx, TASKS, seed=1234), made


def test_each_rank_rolls_out_its_share_and_every_rank_gets_the_whole_panel(monkeypatch):
    rank0 = [SimpleNamespace(task=t, group_id=i, traj_id=i) for i, t in enumerate(TASKS[:2])]
    episodes, made = _rank(monkeypatch, rank=1, world=2, other_ranks={0: rank0})
    assert [ids for ids, _, _ in made] == [["t2", "t3", "t4"]]  # rank 1's share only, not the whole panel
    assert made[0][1] == distributed.shard_seed(1234, 2) != 1234 and made[0][2] == 1  # its own stream, one a task
    assert [e.task.task_id for e in episodes] == ["t0", "t1", "t2", "t3", "t4"]  # the panel's order


def test_one_process_evaluates_the_whole_panel_with_the_steps_seed(monkeypatch):
    episodes, made = _rank(monkeypatch, rank=0, world=1, other_ranks={})
    assert made == [(["t0", "t1", "t2", "t3", "t4"], 1234, 1)]  # as before the split: the same draws
    assert [e.task.task_id for e in episodes] == [t.task_id for t in TASKS]

