"""SDAR and GRPO+OPSD: the gated distillation loss, its gate and where its gradient flows."""
from __future__ import annotations

import math

import pytest
import torch
from synthetic import batch_from_rows

from harness.core import registry
from methods.sdar import gated_distillation

ROWS = [
    dict(group=0, traj=0, step=0, ret=10.0, tokens=3),
    dict(group=0, traj=1, step=0, ret=0.0, tokens=2),
]
STUDENT = [[-1.0, -2.0, -0.5, 0.0], [-0.3, -1.2, 0.0, 0.0]]
TEACHER = [[-0.8, -2.5, -0.5, float("nan")], [-1.3, -0.2, float("nan"), float("nan")]]


def inputs():
    batch = batch_from_rows(ROWS, response_len=4)
    batch = batch.with_columns(teacher_logp=torch.tensor(TEACHER))
    logp = torch.tensor(STUDENT, requires_grad=True)
    return batch, logp


def expected_loss(beta, coef):
    terms, gates = [], []
    for s_row, q_row, k in zip(STUDENT, TEACHER, [3, 2]):
        for s, q in zip(s_row[:k], q_row[:k]):
            gate = 1.0 / (1.0 + math.exp(-beta * (q - s)))
            gates.append(gate)
            terms.append(gate * (q - s))
    return coef * sum(terms) / len(terms), gates


@pytest.mark.parametrize("beta", [5.0, 1.0, 0.0])
def test_sdar_loss_value_and_gradient(beta):
    batch, logp = inputs()
    loss, diag = registry.build("sdar", {"beta": beta}).aux_loss(batch, logp)
    value, gates = expected_loss(beta, 0.01)
    assert loss.item() == pytest.approx(value, rel=1e-6)
    loss.backward()
    # d/ds of c·mean(g·(q − s)) with g detached is −c·g/N on real tokens and 0 on padding
    expected_grad = [[-0.01 * g / 5 for g in gates[:3]] + [0.0], [-0.01 * g / 5 for g in gates[3:]] + [0.0, 0.0]]
    assert logp.grad.tolist() == [pytest.approx(r, rel=1e-6) for r in expected_grad]
    assert diag["gate_mean"] == pytest.approx(sum(gates) / 5, rel=1e-6)
    assert diag["gate_active_ratio"] == pytest.approx(sum(g > 0.5 for g in gates) / 5)
    assert diag["teacher_gap_mean"] == pytest.approx((0.2 - 0.5 + 0.0 - 1.0 + 1.0) / 5, abs=1e-6)


def test_beta_zero_gives_gate_half_and_no_gradient_into_teacher():
    batch, logp = inputs()
    teacher = torch.tensor(TEACHER, requires_grad=True)
    batch = batch.with_columns(teacher_logp=teacher)
    for method in (registry.build("sdar", {"beta": 0.0}), registry.build("grpo_opsd")):
        loss, diag = method.aux_loss(batch, logp)
        assert diag["gate_mean"] == 0.5 and diag["gate_active_ratio"] == 0.0
        assert loss.item() == pytest.approx(expected_loss(0.0, 0.01)[0], rel=1e-6)
    _, gate, *_ = gated_distillation(logp, teacher, batch.response_mask, 0.0, "token-mean")
    assert (gate[batch.response_mask] == 0.5).all()
    loss.backward()
    assert teacher.grad is None or not teacher.grad.any()  # the teacher gets no gradient
    # every real token gets −c·g/N with g = 0.5; padding gets nothing
    expected = [[-0.01 * 0.5 / 5] * 3 + [0.0], [-0.01 * 0.5 / 5] * 2 + [0.0, 0.0]]
    assert logp.grad.tolist() == [pytest.approx(r) for r in expected]


def test_sdar_advantages_are_grpo_and_coef_zero_adds_nothing():
    batch, logp = inputs()
    grpo_adv, _ = registry.build("grpo").advantages(batch)
    for name in ("sdar", "grpo_opsd"):
        method = registry.build(name, {"coef": 0.0})
        adv, _ = method.advantages(batch)
        assert torch.equal(adv, grpo_adv)
        loss, _ = method.aux_loss(batch, logp)
        assert loss.item() == 0.0


def test_rows_without_teacher_get_no_distillation():
    batch, logp = inputs()
    batch = batch.with_columns(teacher_available=torch.tensor([True, False]))
    loss, _ = registry.build("sdar").aux_loss(batch, logp)
    first_row_only = [
        (1.0 / (1.0 + math.exp(-5 * (q - s)))) * (q - s) for s, q in zip(STUDENT[0][:3], TEACHER[0][:3])
    ]
    assert loss.item() == pytest.approx(0.01 * sum(first_row_only) / 3, rel=1e-6)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_rows_without_teacher_are_dropped_even_when_their_teacher_is_nan(agg):
    batch, logp = inputs()
    nan_row = torch.tensor(TEACHER)
    nan_row[1] = float("nan")  # an engine that never scored the row may leave anything there
    batch = batch.with_columns(teacher_logp=nan_row, teacher_available=torch.tensor([True, False]))
    loss, diag = registry.build("sdar", {"loss_agg_mode": agg}).aux_loss(batch, logp)
    loss.backward()
    gaps = [q - s for s, q in zip(STUDENT[0][:3], TEACHER[0][:3])]
    gates = [1.0 / (1.0 + math.exp(-5 * d)) for d in gaps]
    row_sum = sum(g * d for g, d in zip(gates, gaps))
    expected = row_sum / 3 if agg != "seq-mean-token-sum" else row_sum  # one row with tokens, 3 tokens
    assert loss.item() == pytest.approx(0.01 * expected, rel=1e-6)
    assert logp.grad[1].tolist() == [0.0] * 4
    assert diag["gate_mean"] == pytest.approx(sum(gates) / 3, rel=1e-6)
    assert diag["teacher_gap_mean"] == pytest.approx(sum(gaps) / 3, rel=1e-6)
    assert diag["gate_active_ratio"] == pytest.approx(sum(d > 0 for d in gaps) / 3)


def test_grpo_opsd_has_no_beta_option():
    from harness.core.typed import ConfigError

    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['beta'\]"):
        registry.build("grpo_opsd", {"beta": 5.0})
