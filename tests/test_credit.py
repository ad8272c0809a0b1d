"""Credit scored against ground truth (harness/engine/credit.py): the AUROC by hand, and on real Gates episodes
GRPO's 0.5 against a teacher method given an oracle teacher."""
from __future__ import annotations

import math
import random

import pytest
import torch
from synthetic import batch_from_rows

from envs.gates.benchmark import GatesBenchmark
from envs.gates.config import GatesConfig
from envs.vector import VectorEnv
from harness.config_sections import RolloutConfig
from harness.core import registry
from harness.engine import rollout
from harness.engine.credit import DETOUR_AUROC, FATAL_AUROC, credit_metrics, turn_values
from harness.policy.backends import Generation


def labelled(rows, labels, values):
    batch = batch_from_rows(rows, response_len=3)
    return batch.with_columns(credit_label=labels), torch.tensor(values, dtype=torch.float32)


def test_auroc_with_ties_by_hand():
    rows = [  # a lost episode: fatal last; a lost episode with nothing to rank; a won episode with a detour
        *({"group": 0, "traj": 0, "step": k, "ret": 0.0} for k in range(5)),
        *({"group": 0, "traj": 1, "step": k, "ret": 0.0} for k in range(2)),
        *({"group": 1, "traj": 2, "step": k, "ret": 1.0} for k in range(5)),
    ]
    labels = ["correct", "detour", "correct", "invalid", "fatal",
              "invalid", "fatal",
              "correct", "detour", "correct", "invalid", "correct"]
    values = [-1.0, -2.0, -3.0, -9.0, -3.0,
              -5.0, -5.0,
              1.0, 1.0, 2.0, 0.0, 1.0]
    batch, adv = labelled(rows, labels, values)
    metrics = credit_metrics(batch, adv)
    # episode 0: -Ã of the fatal turn (3) against 1, 2, 3 (the invalid 9 is left out): 1 + 1 + 1/2 of 3 pairs
    assert metrics[FATAL_AUROC] == pytest.approx(2.5 / 3)
    # episode 2: correct 1, 2, 1 against the detour's 1: 1/2 + 1 + 1/2 of 3 pairs (the invalid 0 is left out)
    assert metrics[DETOUR_AUROC] == pytest.approx(2.0 / 3)
    assert metrics["credit/fatal_episodes"] == 1 and metrics["credit/detour_episodes"] == 1


def test_scores_average_over_episodes_not_pairs():
    rows = [{"group": 0, "traj": t, "step": k, "ret": 0.0} for t, n in ((0, 2), (1, 4)) for k in range(n)]
    labels = ["correct", "fatal", "correct", "correct", "correct", "fatal"]
    values = [0.0, -1.0, -2.0, -2.0, -2.0, 0.0]  # episode 0 ranks the fatal turn first (1), episode 1 last (0)
    metrics = credit_metrics(*labelled(rows, labels, values))
    assert metrics[FATAL_AUROC] == pytest.approx(0.5)  # (1 + 0) / 2, not weighted by the 1 and 3 pairs
    assert math.isnan(metrics[DETOUR_AUROC]) and metrics["credit/detour_episodes"] == 0


def test_constant_advantage_over_turns_of_any_length_is_a_tie():
    value = torch.tensor(0.1, dtype=torch.float32)
    mask = torch.arange(12)[None, :] < torch.tensor([[1], [3], [7], [11]])
    means = turn_values(torch.where(mask, value, 0.0), mask)
    rows = [{"group": 0, "traj": 0, "step": k, "ret": 0.0} for k in range(4)]
    metrics = credit_metrics(*labelled(rows, ["correct", "detour", "correct", "fatal"], means.tolist()))
    assert metrics[FATAL_AUROC] == 0.5


def test_unlabelled_batch_scores_nothing():
    batch = batch_from_rows([{"group": 0, "traj": 0, "step": 0, "ret": 1.0}])
    assert credit_metrics(batch, torch.zeros(1, 2)) == {}


def test_unknown_label_is_refused():
    with pytest.raises(ValueError, match="credit_label"):
        rollout.credit_label("lucky", True)
    assert rollout.credit_label("fatal", False) == "invalid" and rollout.credit_label(None, False) is None


class ScriptedPolicy:
    """A backend that reads the Gates prompt and plays it: a wrong hall turn 3 times in 10, a wrong door 1 time
    in 4, an invalid reply 1 time in 25 (seeded), so a batch holds fatal turns, detours and wins."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def generate(self, prompts, **_):
        return [self._reply(p) for p in prompts]

    def _reply(self, prompt: str) -> Generation:
        key = prompt.split("you hold the ", 1)[1].split(" key", 1)[0]
        now = prompt.split("now: ", 1)[1].split("\n", 1)[0].removeprefix("a wall. ")
        actions = prompt.split("actions: ", 1)[1].split("\n", 1)[0].split(" | ")
        if now.startswith("hall"):
            right = "go " + now.rstrip(".").rsplit(" ", 1)[1]
            action = right if self.rng.random() > 0.3 else next(a for a in actions if a != right)
        else:
            right = f"open {key}"
            action = right if self.rng.random() > 0.25 else next(a for a in actions if a != right)
        text = "<action>fly</action>" if self.rng.random() < 0.04 else f"<action>{action}</action>"
        length = self.rng.randint(3, 8)
        return Generation(text, [1, 2, 3], list(range(4, 4 + length)), [-0.5] * length, False)


@pytest.fixture(scope="module")
def gates_batch():
    bench = GatesBenchmark(GatesConfig(horizon=4, pivots=2, choices=2, slack=2, train_panel_size=16))
    envs = VectorEnv(bench.make_env, num_workers=0)
    try:
        trajs = rollout.collect(ScriptedPolicy(), bench, envs, list(bench.panel("train").tasks), group_size=8,
                                rollout_cfg=RolloutConfig(think=False), max_steps=bench.max_steps, temperature=1.0,
                                seed=0)
    finally:
        envs.close()
    batch = rollout.to_step_batch(trajs, pad_id=0)
    return batch.with_columns(old_logp=batch.rollout_logp, ref_logp=batch.rollout_logp)


def oracle_teacher(batch, lift: float = 1.0):
    """teacher log-prob raised on the correct turns, lowered on the fatal turn and the detours."""
    sign = torch.tensor([{"correct": 1.0, "fatal": -1.0, "detour": -1.0}.get(x, 0.0) for x in batch.credit_label])
    teacher = torch.where(batch.response_mask, batch.old_logp + lift * sign[:, None], 0.0)
    return batch.with_columns(teacher_logp=teacher, teacher_available=torch.ones(batch.num_rows, dtype=torch.bool))


def test_gates_batch_holds_every_label(gates_batch):
    labels = set(gates_batch.credit_label)
    assert labels == {"correct", "detour", "fatal", "invalid"}
    fatal_rows = [i for i, x in enumerate(gates_batch.credit_label) if x == "fatal"]
    # a wrong door ends the episode: the fatal turn is a lost episode's last turn
    assert all(not gates_batch.success[i] and gates_batch.step_idx[i] == gates_batch.n_steps[i] - 1
               for i in fatal_rows)


def test_grpo_cannot_tell_the_fatal_turn(gates_batch):
    method = registry.build("grpo")
    advantages, _ = method.advantages(gates_batch)
    metrics = credit_metrics(gates_batch, advantages)
    assert metrics["credit/fatal_episodes"] >= 10 and metrics["credit/detour_episodes"] >= 5
    assert metrics[FATAL_AUROC] == 0.5 and metrics[DETOUR_AUROC] == 0.5


@pytest.mark.parametrize("name", ["sharpo", "rlsd"])
def test_a_teacher_method_with_an_oracle_teacher_finds_it(gates_batch, name):
    batch = oracle_teacher(gates_batch)
    method = registry.build(name)
    advantages, _ = method.advantages(batch)
    metrics = credit_metrics(batch, advantages)
    assert metrics[FATAL_AUROC] > 0.6 and metrics[DETOUR_AUROC] > 0.6
    # an anti-oracle (the teacher's gap flipped) ranks them the wrong way round
    flipped = credit_metrics(batch, method.advantages(oracle_teacher(gates_batch, lift=-1.0))[0])
    assert flipped[FATAL_AUROC] < 0.4


def test_gigpo_anchor_states_single_out_the_wrong_door(gates_batch):
    # siblings that reach the same gate share its observation: the wrong door's step group holds the right one
    advantages, _ = registry.build("gigpo").advantages(gates_batch)
    assert credit_metrics(gates_batch, advantages)[FATAL_AUROC] > 0.7


def test_position_alone_earns_auroc_but_not_the_fatal_share():
    """GRPO × (1 + εt), the recency rule: when the fatal turn is last it 'finds' it by rank (AUROC 1, as its
    position baseline), yet the fatal turn's share of the blame stays GRPO's 1/n; an oracle's share is 1."""
    from harness.engine.credit import FATAL_AUROC_POSITION, FATAL_SHARE

    rows = [{"group": 0, "traj": 0, "step": k, "ret": 0.0} for k in range(4)]
    labels = ["correct", "correct", "correct", "fatal"]
    recency = [-1.0 * (1 + 1e-3 * t) for t in range(4)]
    metrics = credit_metrics(*labelled(rows, labels, recency))
    assert metrics[FATAL_AUROC] == 1.0 and metrics[FATAL_AUROC_POSITION] == 1.0
    assert metrics[FATAL_SHARE] == pytest.approx(0.25, abs=1e-3)
    oracle = credit_metrics(*labelled(rows, labels, [0.0, 0.0, 0.0, -1.0]))
    assert oracle[FATAL_SHARE] == 1.0


def test_a_fatal_turn_before_the_end_defeats_position():
    """With a delayed alarm the fatal turn is followed by neutral turns: recency blames them, not it."""
    from harness.engine.credit import FATAL_AUROC_POSITION, FATAL_SHARE, NEUTRAL_SHARE

    rows = [{"group": 0, "traj": 0, "step": k, "ret": 0.0} for k in range(5)]
    labels = ["correct", "fatal", "neutral", "neutral", "neutral"]
    recency = [-1.0 * (1 + 1e-3 * t) for t in range(5)]
    metrics = credit_metrics(*labelled(rows, labels, recency))
    assert metrics[FATAL_AUROC] == 0.25 and metrics[FATAL_AUROC_POSITION] == 0.25  # above the first turn only
    assert metrics[FATAL_SHARE] == pytest.approx(0.2, abs=1e-3)
    assert metrics[NEUTRAL_SHARE] == pytest.approx(0.6, abs=1e-3)
    oracle = credit_metrics(*labelled(rows, labels, [0.0, -1.0, 0.0, 0.0, 0.0]))
    assert oracle[FATAL_AUROC] == 1.0 and oracle[FATAL_SHARE] == 1.0 and oracle[NEUTRAL_SHARE] == 0.0


def test_an_episode_with_no_advantage_has_no_share():
    from harness.engine.credit import FATAL_SHARE

    rows = [{"group": 0, "traj": 0, "step": k, "ret": 0.0} for k in range(2)]
    metrics = credit_metrics(*labelled(rows, ["correct", "fatal"], [0.0, 0.0]))
    assert math.isnan(metrics[FATAL_SHARE]) and metrics["credit/fatal_share_episodes"] == 0
