"""GraphGPO and G2PO (methods/FORMULAS.md#graphgpo, #g2po): hand-computed cases, the state after each step in the
rollout's batch, and agreement with line-by-line transcriptions of the authors' functions (tests/reference_*.py) on
random batches whose states recur across rollouts, with cycles, self-loops, unreachable states and singleton groups.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from synthetic import batch_from_rows

from envs.base import Task
from harness.core import registry
from harness.core.batch import SUCCESS_STATE, StepBatch
from harness.engine import rollout
from methods._state_graph import UNREACHABLE, goal_distance, state_graph
from tests import reference_g2po, reference_graphgpo

A, B, C = 101, 102, 103
pytestmark = pytest.mark.filterwarnings(r"ignore:std\(\):UserWarning")  # core_g2po.py: one-row NaN


def two_rollouts(**extra) -> StepBatch:
    """A → B → success (won) and A → C → C (lost): distances A 2, B 1, success 0, C unreachable."""
    return batch_from_rows([
        dict(group=0, traj=0, step=0, ret=10, obs=A, next=B, **extra),
        dict(group=0, traj=0, step=1, ret=10, obs=B, next=SUCCESS_STATE, reward=10, **extra),
        dict(group=0, traj=1, step=0, ret=0, obs=A, next=C, **extra),
        dict(group=0, traj=1, step=1, ret=0, obs=C, next=C, **extra),
    ])


def test_distances_of_the_hand_built_graph():
    b = two_rollouts()
    graph = state_graph(b.group_id, b.obs_hash, b.next_obs_hash)
    distance = goal_distance(graph)
    assert distance[graph.src].tolist() == [2, 1, 2, UNREACHABLE]
    assert distance[graph.dst].tolist() == [1, 0, UNREACHABLE, UNREACHABLE]


def episode_terms(scores):
    scores = torch.tensor(scores, dtype=torch.float64)
    return (scores - scores.mean()) / (scores.std() + 1e-6)


def test_graphgpo_hand_computed():
    adv, diag = registry.build("graphgpo").advantages(two_rollouts())
    # C is unreachable: the longest distance (A: 2) + 1 = 3. R = 10·0.1^d(next): B 1, success 10, C 0.01
    pair = torch.tensor([1.0, 0.01], dtype=torch.float64)
    step_a = (pair - pair.mean()) / (pair.std() + 1e-6)  # A's step group; B and C are singletons: 0
    expected = episode_terms([10, 10, 0, 0]) + torch.tensor([step_a[0], 0, step_a[1], 0])
    assert torch.allclose(adv[:, 0].double(), expected, atol=1e-6)
    assert diag["recurring_state_row_frac"] == 0.5  # the two rows at A
    assert diag["success_reachable_state_frac"] == pytest.approx(2 / 3)  # A and B, not C


def test_graphgpo_group_without_success_has_distance_one_everywhere():
    rows = [dict(group=0, traj=t, step=s, ret=0, obs=s, valid=(t, s) != (1, 0)) for t in range(2) for s in range(2)]
    adv, diag = registry.build("graphgpo", {"episode_weight": 0.0}).advantages(batch_from_rows(rows))
    assert diag["next_distance_mean"] == 1.0 and diag["success_reachable_state_frac"] == 0.0
    # only the penalty tells the rows of step group 0 apart: R = 10·0.1 = 1 and 1 − 0.1
    expected = 0.05 / (0.1 / math.sqrt(2) + 1e-6)
    assert adv[0, 0] == pytest.approx(expected, abs=1e-6) and adv[2, 0] == pytest.approx(-expected, abs=1e-6)
    assert adv[1, 0] == 0 and adv[3, 0] == 0


def test_g2po_hand_computed():
    adv, diag = registry.build("g2po").advantages(two_rollouts())
    value = {A: (0.95**2 * 10 + 0) / 2, B: 0.95 * 10, C: 0.0}
    next_value = torch.tensor([value[B], 10.0, value[C], 0.0], dtype=torch.float64)  # last rows: terminals 10 / 0
    own = torch.tensor([value[A], value[B], value[A], value[C]], dtype=torch.float64)
    pair = next_value[[0, 2]]
    next_adv = torch.zeros(4, dtype=torch.float64)
    next_adv[[0, 2]] = (pair - pair.mean()) / (pair.std() + 1e-6)
    gain = next_value - own
    gain_adv = (gain - gain.mean()) / (gain.std() + 1e-6)
    expected = episode_terms([10, 10, 0, 0]) + next_adv + gain_adv
    assert torch.allclose(adv[:, 0].double(), expected, atol=1e-6)
    assert diag["success_reachable_state_frac"] == pytest.approx(2 / 3)


def test_g2po_one_row_task_group_has_no_step_term_not_nan():
    """The gain term's torch.std of one value is NaN in core_g2po.py; here that group's step terms are 0, so the row
    keeps its episode advantage (a one-member group: mean 0, std 1, so R = 10)."""
    b = batch_from_rows([dict(group=0, traj=0, step=0, ret=10)])
    adv, _ = registry.build("g2po").advantages(b)
    assert torch.isnan(reference_g2po.published(b)).all()
    assert torch.equal(adv, registry.build("grpo").advantages(b)[0]) and adv[0, 0] == pytest.approx(10, abs=1e-4)


def test_the_batch_carries_the_state_after_each_step():
    task = Task("t", "kind", "train")

    def turn(obs, nxt):
        return rollout.Turn("p", [1], [2], [0.0], "", "a", True, obs, nxt, 0.0)

    won = rollout.Trajectory(task, 0, 0, turns=[turn("o1", "o2"), turn("o2", "you win")], won=True)
    lost = rollout.Trajectory(task, 0, 1, turns=[turn("o1", "o3"), turn("o3", "o3")], truncated=True)
    b = rollout.to_step_batch([won, lost], pad_id=0)
    h = rollout.observation_hash
    assert b.obs_hash.tolist() == [h("o1"), h("o2"), h("o1"), h("o3")]
    assert b.next_obs_hash.tolist() == [h("o2"), SUCCESS_STATE, h("o3"), h("o3")]


# ---------------------------------------------------------------------------------- random recurring-state batches
def state_batch(seed: int, n_groups: int = 10, max_group: int = 8, max_steps: int = 12, pool: int = 5,
                response_len: int = 6, shuffle: bool = True) -> StepBatch:
    """Rollouts wander over a small pool of states per task group (all start at state 0), so states recur across
    rollouts and inside one, with cycles and self-loops; a won rollout ends in success, a lost one in a pool state
    (or one of its own). Group 0 is one rollout of one step. Rows are shuffled unless ``shuffle`` is False."""
    g = torch.Generator().manual_seed(seed)
    rows, traj = [], 0
    for group in range(n_groups):
        size = 1 if group == 0 else int(torch.randint(1, max_group + 1, (1,), generator=g))
        for _ in range(size):
            length = 1 if group == 0 else int(torch.randint(1, max_steps + 1, (1,), generator=g))
            won = bool(torch.rand(1, generator=g) < 0.5)
            states = [0] + torch.randint(0, pool, (length,), generator=g).tolist()
            final = SUCCESS_STATE if won else (states[-1] if torch.rand(1, generator=g) < 0.7 else 1000 + traj)
            for step in range(length):
                rows.append(dict(group=group * 5 + 2, traj=traj * 3 + 1, step=step, ret=10.0 * won,
                                 obs=group * 100 + states[step],
                                 next=final if step == length - 1 else group * 100 + states[step + 1],
                                 valid=bool(torch.rand(1, generator=g) > 0.2), reward=10.0 * won * (step == length - 1),
                                 tokens=int(torch.randint(1, response_len + 1, (1,), generator=g))))
            traj += 1
    if shuffle:
        rows = [rows[i] for i in torch.randperm(len(rows), generator=g).tolist()]
    return batch_from_rows(rows, response_len)


def agreement(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor) -> float:
    return float((ours.double() - theirs.double())[mask].abs().max())


def float32_rounding_only(ours: torch.Tensor, theirs32: torch.Tensor, theirs64: torch.Tensor, mask) -> bool:
    """Every difference from the published float32 arithmetic is float32's own: no larger than the published code's
    float32-to-float64 difference (≤ 1.7e-5 on these batches: sums of ~100 values of size ~10), plus 1e-5."""
    ours, theirs32, theirs64 = ours.double()[mask], theirs32.double()[mask], theirs64.double()[mask]
    return bool(((ours - theirs32).abs() <= (theirs64 - theirs32).abs() + 1e-5).all())


GRAPHGPO_OPTIONS = [{}, {"mode": "mean_norm"}, {"normalize_distance": True}, {"gamma": 0.2, "episode_weight": 0.0}]


def graphgpo_published(b, options, dtype):
    return reference_graphgpo.published(
        b, gamma=options.get("gamma", 0.1), mode=options.get("mode", "mean_std_norm"),
        normalize_distance=options.get("normalize_distance", False),
        episode_advantage_w=options.get("episode_weight", 1.0), dtype=dtype)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("options", GRAPHGPO_OPTIONS)
def test_graphgpo_agrees_with_the_published_code(seed, options):
    """The authors' settings (γ 0.1, penalty 0.1): < 1e-5 against their code run in float64; against it in float32
    (as published) only float32's rounding differs, tied returns included (methods/FORMULAS.md#graphgpo)."""
    b = state_batch(seed)
    ours, _ = registry.build("graphgpo", options).advantages(b)
    theirs64 = graphgpo_published(b, options, np.float64)
    assert agreement(ours, theirs64, b.response_mask) < 1e-5
    assert float32_rounding_only(ours, graphgpo_published(b, options, np.float32), theirs64, b.response_mask)


@pytest.mark.parametrize("seed", range(3))
def test_graphgpo_agrees_in_float32_where_float32_is_exact(seed):
    """γ 0.5 and penalty 0.25: every return is a short binary fraction, so the published float32 code ties exactly."""
    b = state_batch(seed)
    ours, _ = registry.build("graphgpo", {"gamma": 0.5, "invalid_action_penalty": 0.25}).advantages(b)
    theirs = reference_graphgpo.published(b, gamma=0.5, penalty=0.25)
    assert agreement(ours, theirs, b.response_mask) < 1e-5


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("options", [{}, {"mode": "mean_norm"}, {"step_weight": 0.5}])
def test_g2po_agrees_with_the_published_code(seed, options):
    """< 1e-5 against the published code run in float64; in float32 (its gain and episode terms, as published) only
    float32's rounding differs. One-row task groups (group 0, and any other) are NaN there: compared apart."""
    b = state_batch(seed)
    ours, _ = registry.build("g2po", options).advantages(b)
    mode, weight = options.get("mode", "mean_std_norm"), options.get("step_weight", 1.0)
    theirs64 = reference_g2po.published(b, mode=mode, step_advantage_w=weight, dtype=torch.float64)
    theirs32 = reference_g2po.published(b, mode=mode, step_advantage_w=weight)
    ids, counts = torch.unique(b.group_id, return_counts=True)
    single = torch.isin(b.group_id, ids[counts == 1])[:, None] & b.response_mask
    if mode == "mean_std_norm":
        assert torch.isnan(theirs64[single]).all()
    grpo, _ = registry.build("grpo", {"norm_by_std": mode == "mean_std_norm"}).advantages(b)
    assert torch.equal(ours[single], grpo[single])  # no step term on the one-row group
    assert agreement(ours, theirs64, b.response_mask & ~single) < 1e-5
    assert float32_rounding_only(ours, theirs32, theirs64, b.response_mask & ~single)


def test_row_order_does_not_matter():
    shuffled, ordered = state_batch(5), state_batch(5, shuffle=False)
    for name in ("graphgpo", "g2po"):
        a, _ = registry.build(name).advantages(shuffled)
        key = [(int(t), int(s)) for t, s in zip(shuffled.traj_id, shuffled.step_idx)]
        order = sorted(range(len(key)), key=key.__getitem__)
        b, _ = registry.build(name).advantages(ordered)
        assert torch.allclose(a[order], b, atol=1e-6)
