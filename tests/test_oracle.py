"""The oracle control arms (methods/oracle.py): their advantages on a hand-made batch, and their refusal on a
benchmark that labels no turns."""
from __future__ import annotations

import pytest
import torch
from synthetic import batch_from_rows

from harness.core import registry
from harness.core.typed import ConfigError


def hand_batch():
    """One group of three rollouts: won (correct, neutral, correct); lost with its fatal turn in the middle
    (correct, fatal, neutral); lost at the step limit, no losing turn labelled (correct, detour)."""
    rows = [{"group": 0, "traj": 0, "step": k, "ret": 1.0} for k in range(3)]
    rows += [{"group": 0, "traj": 1, "step": k, "ret": 0.0} for k in range(3)]
    rows += [{"group": 0, "traj": 2, "step": k, "ret": 0.0} for k in range(2)]
    labels = ["correct", "neutral", "correct", "correct", "fatal", "neutral", "correct", "detour"]
    return batch_from_rows(rows, response_len=2).with_columns(credit_label=labels)


def row_values(name, batch, **options):
    return registry.build(name, options).advantages(batch)[0][:, 0].tolist()


def test_oracle_fatal_blames_the_fatal_turn_only():
    batch = hand_batch()
    grpo = row_values("grpo", batch)
    won, lost, cut = grpo[0], grpo[3], grpo[6]
    assert won > 0 > lost and lost == cut  # GRPO: one value per rollout
    assert row_values("oracle_fatal", batch) == pytest.approx([won, won, won, 0.0, lost, 0.0, cut, cut])


def test_oracle_decisive_also_skips_neutral_turns_in_won_episodes():
    batch = hand_batch()
    grpo = row_values("grpo", batch)
    won, lost, cut = grpo[0], grpo[3], grpo[6]
    assert row_values("oracle_decisive", batch) == pytest.approx([won, 0.0, won, 0.0, lost, 0.0, cut, cut])


def test_others_interpolates_towards_grpo():
    batch = hand_batch()
    grpo = torch.tensor(row_values("grpo", batch))
    half = torch.tensor(row_values("oracle_decisive", batch, others=0.5))
    kept = torch.tensor([1, 0, 1, 0, 1, 0, 1, 1], dtype=torch.bool)
    assert torch.allclose(half[kept], grpo[kept]) and torch.allclose(half[~kept], 0.5 * grpo[~kept])


def test_an_invalid_action_is_the_turn_that_lost():
    rows = [{"group": 0, "traj": 0, "step": 0, "ret": 1.0},
            {"group": 0, "traj": 1, "step": 0, "ret": 0.0}, {"group": 0, "traj": 1, "step": 1, "ret": 0.0,
                                                               "valid": False}]
    batch = batch_from_rows(rows).with_columns(credit_label=["correct", "correct", "invalid"])
    values = row_values("oracle_fatal", batch)
    assert values[0] > 0 and values[1] == 0.0 and values[2] < 0


def test_oracles_are_controls_not_methods():
    for name in ("oracle_fatal", "oracle_decisive"):
        assert registry.get(name).control == "positive"
    assert registry.get("grpo").control == ""


def test_oracle_refused_on_a_benchmark_without_labels():
    from harness.config import load_config

    with pytest.raises(ConfigError, match=r"labels no turns.*gates"):
        load_config("config/cpu.yaml", ["method=oracle_fatal", "benchmark=alfworld"])
    assert load_config("config/cpu.yaml", ["method=oracle_fatal"]).method.name == "oracle_fatal"


@pytest.mark.parametrize("benchmark", ["alfworld", "webshop"])
def test_the_refusal_needs_no_engine_and_says_what_the_engine_says(benchmark, monkeypatch):
    """ALFWorld's and WebShop's engines load lazily (their packages may be absent on a GPU node): the label check
    reads the options class, which must agree with the engine's own declaration."""
    from envs.base import BENCHMARKS, benchmark_config
    from harness.config import load_config
    from harness.core.plugins import Registry

    assert benchmark_config(benchmark).labels_turns == BENCHMARKS.get(benchmark).labels_turns
    real_get = Registry.get

    def no_engine(self, name):
        if self is BENCHMARKS and name == benchmark:
            raise AssertionError("the engine was imported")
        return real_get(self, name)

    monkeypatch.setattr(Registry, "get", no_engine)
    with pytest.raises(ConfigError, match="labels no turns"):
        load_config("config/cpu.yaml", ["method=oracle_fatal", f"benchmark={benchmark}"])
