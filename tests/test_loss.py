"""harness/core/loss.py against hand arithmetic and verl's formulas."""
from __future__ import annotations

import math

import pytest
import torch
from synthetic import batch_from_rows

from harness.config_sections import TrainConfig
from harness.core import registry
from harness.core.batch import MissingColumnError
from harness.core.loss import aggregate, kl_penalty, policy_loss, ppo_clip_loss

LOSS = torch.tensor([[1.0, 2.0, 3.0, 99.0], [4.0, 99.0, 99.0, 99.0], [99.0, 99.0, 99.0, 99.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4),
        ("seq-mean-token-mean", ((1 + 2 + 3) / 3 + 4 / 1) / 2),  # the empty row is left out
        ("seq-mean-token-sum", ((1 + 2 + 3) + 4) / 2),
        ("seq-mean-token-sum-norm", (1 + 2 + 3 + 4) / 4),  # divided by the response length (verl default)
    ],
)
def test_aggregate_modes(mode, expected):
    assert aggregate(LOSS, MASK, mode).item() == pytest.approx(expected)


def test_aggregate_ignores_nan_padding_and_rejects_unknown_mode():
    nan_pad = torch.where(MASK, LOSS, torch.tensor(float("nan")))
    assert aggregate(nan_pad, MASK, "token-mean").item() == pytest.approx(2.5)
    assert aggregate(LOSS, torch.zeros_like(MASK), "token-mean").item() == 0.0
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(LOSS, MASK, "seq-sum")


def test_ppo_clip_and_dual_clip():
    adv = torch.tensor([[2.0, 2.0, -1.0, -1.0, -1.0]])
    ratio = torch.tensor([[1.5, 0.5, 0.5, 1.1, 5.0]])
    old = torch.zeros_like(ratio)
    mask = torch.ones_like(ratio, dtype=torch.bool)
    loss, metrics = ppo_clip_loss(ratio.log(), old, adv, mask, clip_ratio=0.2, clip_ratio_c=3.0)
    per_token = [
        -2.0 * 1.2,  # A > 0, r above 1 + ε: clipped
        -2.0 * 0.5,  # A > 0, r below 1 − ε: max(−A r, −A (1 − ε)) = −A r
        1.0 * 0.8,  # A < 0, r = 0.5: max(0.5, 0.8)
        1.0 * 1.1,  # A < 0, inside the clip range
        1.0 * 3.0,  # A < 0, r = 5: max(5, 1.2) = 5, capped by the dual clip at −A·c = 3
    ]
    assert loss.item() == pytest.approx(sum(per_token) / 5, rel=1e-6)
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 5)  # tokens 1 and 3
    assert metrics["pg_clipfrac_lower"] == pytest.approx(1 / 5)
    assert metrics["ppo_kl"] == pytest.approx(-sum(math.log(r) for r in [1.5, 0.5, 0.5, 1.1, 5.0]) / 5, rel=1e-6)


def test_kl_estimators():
    logp, ref = torch.tensor([-1.0, -2.0, -0.1]), torch.tensor([-1.5, -1.0, -30.0])
    d = [-1.5 - -1.0, -1.0 - -2.0, -30.0 - -0.1]  # ref − logp
    assert kl_penalty(logp, ref, "k1").tolist() == pytest.approx([-x for x in d])
    assert kl_penalty(logp, ref, "k2").tolist() == pytest.approx([0.5 * x * x for x in d])
    k3 = [math.exp(x) - x - 1 for x in d[:2]] + [10.0]  # the third is clamped to 10
    assert kl_penalty(logp, ref, "k3").tolist() == pytest.approx(k3, rel=1e-6)
    with pytest.raises(ValueError, match="k1"):
        kl_penalty(logp, ref, "k4")


def test_policy_loss_combines_ppo_kl_and_aux():
    rows = [dict(group=0, traj=0, step=0, ret=10.0, tokens=3), dict(group=0, traj=1, step=0, ret=0.0, tokens=2)]
    batch = batch_from_rows(rows, response_len=3)
    batch = batch.with_columns(ref_logp=torch.where(batch.response_mask, batch.old_logp - 0.3, batch.old_logp))
    logp = torch.where(batch.response_mask, batch.old_logp + 0.1, torch.zeros(())).requires_grad_(True)
    cfg = TrainConfig()
    method = registry.build("sdar")
    adv, _ = method.advantages(batch)
    loss, metrics = policy_loss(batch, logp, adv, method, cfg)
    mask = batch.response_mask
    pg, _ = ppo_clip_loss(logp, batch.old_logp, adv, mask)
    kl = aggregate(kl_penalty(logp, batch.ref_logp, "k3"), mask)
    aux, _ = method.aux_loss(batch, logp)
    assert loss.item() == pytest.approx((pg + 0.01 * kl + aux).item(), rel=1e-6)
    assert metrics["actor/kl_loss"] == pytest.approx(kl.item()) and "method/gate_mean" in metrics
    loss.backward()
    assert torch.isfinite(logp.grad).all()


def test_policy_loss_needs_ref_logp_only_with_kl():
    rows = [dict(group=0, traj=0, step=0, ret=1.0), dict(group=0, traj=1, step=0, ret=0.0)]
    cols = batch_from_rows(rows).state_dict()
    cols.pop("ref_logp")
    from harness.core.batch import StepBatch

    batch = StepBatch(**cols)
    method = registry.build("grpo")
    adv, _ = method.advantages(batch)
    logp = torch.where(batch.response_mask, batch.old_logp, torch.zeros(()))
    with pytest.raises(MissingColumnError, match=r"\['ref_logp'\]"):
        policy_loss(batch, logp, adv, method, TrainConfig())
    loss, metrics = policy_loss(batch, logp, adv, method, TrainConfig(kl_coef=0.0))
    assert "actor/kl_loss" not in metrics and math.isfinite(loss.item())


def test_nan_padding_never_reaches_the_gradient():
    rows = [dict(group=0, traj=0, step=0, ret=10.0, tokens=1), dict(group=0, traj=1, step=0, ret=0.0, tokens=3)]
    batch = batch_from_rows(rows, response_len=3)  # old/ref/teacher log-probs are NaN on padding
    logp = torch.full((2, 3), float("nan"))
    logp = torch.where(batch.response_mask, batch.old_logp * 0.9, logp).requires_grad_(True)
    method = registry.build("sdar")
    adv, _ = method.advantages(batch)
    loss, _ = policy_loss(batch, logp, adv, method, TrainConfig())
    loss.backward()
    assert math.isfinite(loss.item())
    assert torch.isfinite(logp.grad).all() and (logp.grad[~batch.response_mask] == 0).all()
