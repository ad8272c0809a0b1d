"""RLSD, SHARPO, StepOPSD on hand-built batches; expected values by hand arithmetic with math.exp."""
from __future__ import annotations

import math

import pytest
import torch
from synthetic import batch_from_rows

from harness.core import registry
from harness.core.typed import ConfigError
from methods._segments import token_counts, token_stats

A = 5.0 / (math.sqrt(50.0) + 1e-6)  # GRPO advantage of returns (10, 0) in a group of two rollouts


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def clip(x, lo, hi):
    return min(max(x, lo), hi)


def pair(gap, tokens=3, **extra):
    """A won and a lost one-segment rollout of one group, with the same per-token gaps."""
    return [
        dict(group=0, traj=0, step=0, ret=10.0, tokens=tokens, gap=gap, **extra),
        dict(group=0, traj=1, step=0, ret=0.0, tokens=tokens, gap=gap, **extra),
    ]


RLSD_GAPS = [0.1, -0.5, 3.0]


def rlsd_expected(lam):
    won = [A * ((1 - lam) + lam * clip(math.exp(d), 0.8, 1.2)) for d in RLSD_GAPS]
    lost = [-A * ((1 - lam) + lam * clip(math.exp(-d), 0.8, 1.2)) for d in RLSD_GAPS]
    return [won, lost]


@pytest.mark.parametrize("step, lam", [(0, 0.5), (25, 0.25), (40, 0.1)])
def test_rlsd_hand_values_and_linear_decay(step, lam):
    adv, diag = registry.build("rlsd").advantages(batch_from_rows(pair(RLSD_GAPS)), step=step)
    assert adv.tolist() == [pytest.approx(r, rel=1e-6) for r in rlsd_expected(lam)]
    assert diag["lambda"] == pytest.approx(lam)


@pytest.mark.parametrize("step", [50, 51, 200])
def test_rlsd_lambda_reaches_zero_at_warmdown(step):
    batch = batch_from_rows(pair(RLSD_GAPS))
    adv, diag = registry.build("rlsd").advantages(batch, step=step)
    assert diag["lambda"] == 0.0
    assert torch.equal(adv, registry.build("grpo").advantages(batch)[0])


def test_rlsd_constant_lambda_and_gap_clamp():
    batch = batch_from_rows(pair([8.0, -8.0], tokens=2))
    adv, _ = registry.build("rlsd", {"warmdown_steps": None, "clamp_gap": True, "clip_eps": 0.99}).advantages(
        batch, step=1000
    )
    # Δ clamped to ±5 before exp; w then clipped to [0.01, 1.99]
    assert adv[0].tolist() == pytest.approx([A * (0.5 + 0.5 * 1.99), A * (0.5 + 0.5 * max(math.exp(-5), 0.01))])


def test_rlsd_rejects_lambda_outside_unit_interval():
    with pytest.raises(ConfigError, match="lam"):
        registry.build("rlsd", {"lam": 1.5})


SHARPO_GAPS = [0.2, 0.4]


@pytest.mark.parametrize(
    "options, won_w, lost_w",
    [
        ({}, 2 * sigmoid(0.3), 2 * sigmoid(-0.3)),
        ({"signed": False}, 2 * sigmoid(0.3), 2 * sigmoid(0.3)),
        ({"reduce": "sum", "tau": 2.0}, 2 * sigmoid(0.6 / 2), 2 * sigmoid(-0.6 / 2)),
        ({"lam": 0.2}, 2 * sigmoid(0.3), 2 * sigmoid(-0.3)),
    ],
)
def test_sharpo_hand_values(options, won_w, lost_w):
    lam = options.get("lam", 0.05)
    adv, diag = registry.build("sharpo", options).advantages(batch_from_rows(pair(SHARPO_GAPS, tokens=2)))
    assert adv[0].tolist() == pytest.approx([A * ((1 - lam) + lam * won_w)] * 2, rel=1e-6)
    assert adv[1].tolist() == pytest.approx([-A * ((1 - lam) + lam * lost_w)] * 2, rel=1e-6)
    assert diag["teacher_group_frac"] == 1.0


def test_sharpo_without_teacher_is_grpo():
    batch = batch_from_rows(pair(SHARPO_GAPS, tokens=2, avail=False))
    adv, diag = registry.build("sharpo").advantages(batch)
    assert torch.equal(adv, registry.build("grpo").advantages(batch)[0])
    assert diag["teacher_group_frac"] == 0.0


# StepOPSD: won rollout 0 with three segments (summed gaps 0.7, 2.0 → clipped 1.0, −1.0), lost rollout 1
# with one segment (summed gap −0.4).
STEP_ROWS = [
    dict(group=0, traj=0, step=0, ret=10.0, gap=[0.3, 0.4]),
    dict(group=0, traj=0, step=1, ret=10.0, gap=[1.5, 0.5]),
    dict(group=0, traj=0, step=2, ret=10.0, gap=[-0.5, -0.5]),
    dict(group=0, traj=1, step=0, ret=0.0, gap=[-0.2, -0.2]),
]


def stepopsd_expected(lam_mix, floor=0.05):
    scores = [10.0, 10.0, 10.0, 0.0]
    m = sum(scores) / 4
    s = math.sqrt(sum((x - m) ** 2 for x in scores) / 3)
    a = [(x - m) / (s + 1e-6) for x in scores]
    budget0 = (0.7 + 1.0 + 1.0) / 3
    hat = [0.7 / (budget0 + 1e-6), 1.0 / (budget0 + 1e-6), -1.0 / (budget0 + 1e-6), -0.4 / (0.4 + 1e-6)]
    sign = [1, 1, 1, -1]
    return [a[k] * max(floor, 1 + lam_mix * sign[k] * hat[k]) for k in range(4)]


@pytest.mark.parametrize("lam_mix", [0.1, 0.3, 1.0])  # 1.0 drives segment 2 of the won rollout to the floor
def test_stepopsd_hand_values(lam_mix):
    adv, diag = registry.build("stepopsd", {"lam_mix": lam_mix}).advantages(batch_from_rows(STEP_ROWS))
    expected = stepopsd_expected(lam_mix)
    assert adv.tolist() == [pytest.approx([v, v], rel=1e-5) for v in expected]
    assert diag["floor_frac"] == (0.25 if lam_mix == 1.0 else 0.0)


def test_stepopsd_mean_reduce_and_alpha():
    adv, _ = registry.build("stepopsd", {"reduce": "mean", "alpha": 0.5}).advantages(batch_from_rows(STEP_ROWS))
    credit = [0.35, 0.5, -0.5, -0.2]  # token means, clipped to ±0.5
    budget0 = (0.35 + 0.5 + 0.5) / 3
    hat = [c / (budget0 + 1e-6) for c in credit[:3]] + [-0.2 / (0.2 + 1e-6)]
    a = stepopsd_expected(0.0)
    expected = [a[k] * (1 + 0.1 * (1 if k < 3 else -1) * hat[k]) for k in range(4)]
    assert adv[:, 0].tolist() == pytest.approx(expected, rel=1e-5)


def test_stepopsd_budget_skips_rows_without_teacher():
    rows = [dict(r) for r in STEP_ROWS]
    rows[2]["avail"] = False  # segment 2 keeps multiplier 1 and leaves the budget: mean |c| = (0.7 + 1.0) / 2
    adv, _ = registry.build("stepopsd").advantages(batch_from_rows(rows))
    a = stepopsd_expected(0.0)
    budget0 = (0.7 + 1.0) / 2
    assert adv[:3, 0].tolist() == pytest.approx(
        [a[0] * (1 + 0.1 * 0.7 / (budget0 + 1e-6)), a[1] * (1 + 0.1 * 1.0 / (budget0 + 1e-6)), a[2]], rel=1e-5
    )


def test_rlsd_token_diagnostics():
    rows = pair(RLSD_GAPS)
    rows[1]["tokens"] = 2  # padding in row 1: statistics must ignore it
    rows[1]["gap"] = RLSD_GAPS[:2]
    adv, diag = registry.build("rlsd").advantages(batch_from_rows(rows, response_len=4), step=0)
    won = [0.5 + 0.5 * clip(math.exp(d), 0.8, 1.2) for d in RLSD_GAPS]
    lost = [0.5 + 0.5 * clip(math.exp(-d), 0.8, 1.2) for d in RLSD_GAPS[:2]]
    values = won + lost
    m = sum(values) / 5
    assert diag["multiplier_mean"] == pytest.approx(m, rel=1e-6)
    assert diag["multiplier_std"] == pytest.approx(math.sqrt(sum((v - m) ** 2 for v in values) / 4), rel=1e-5)
    assert (diag["multiplier_min"], diag["multiplier_max"]) == (pytest.approx(0.9), pytest.approx(1.1))
    gaps = RLSD_GAPS + RLSD_GAPS[:2]
    assert diag["gap_mean"] == pytest.approx(sum(gaps) / 5, rel=1e-6)
    assert adv[1, 2:].abs().sum() == 0


def test_rlsd_extremes_when_every_weight_is_above_one(monkeypatch):
    """Every reweighted token up-weighted (won row: q > s, lost row: q < s), so the padding's w = 1 may be the minimum
    and the extremes are recounted over the real tokens only: they are the multipliers Ã was made with."""
    import methods.rlsd as rlsd_module

    rows = [dict(group=0, traj=0, step=0, ret=10.0, tokens=3, gap=[0.1, 0.05, 3.0]),
            dict(group=0, traj=1, step=0, ret=0.0, tokens=2, gap=[-0.02, -0.1])]
    recounts = []
    original = rlsd_module.moment_stats

    def spy(moments, width, rows_, prefix, lengths, pad, exact_extremes):
        def counted():
            recounts.append(prefix)
            return exact_extremes()
        return original(moments, width, rows_, prefix, lengths, pad, counted if exact_extremes else None)

    monkeypatch.setattr(rlsd_module, "moment_stats", spy)
    batch = batch_from_rows(rows, response_len=4)
    adv, diag = registry.build("rlsd").advantages(batch, step=0)
    assert recounts == ["w"]
    grpo = registry.build("grpo").episode_advantage(batch).float()[:, None]
    multipliers = (adv / grpo)[batch.response_mask]  # Ã / A on the real tokens
    assert diag["multiplier_min"] == pytest.approx(float(multipliers.min()), rel=1e-6)
    assert diag["multiplier_max"] == pytest.approx(float(multipliers.max()), rel=1e-6)
    assert diag["multiplier_min"] == pytest.approx(0.5 + 0.5 * math.exp(0.02), rel=1e-6)  # not the padding's 1
    assert diag["multiplier_max"] == pytest.approx(1.1, rel=1e-6)


@pytest.mark.parametrize("values", [[1.3, 1.1, 1.2], [0.7, 0.9, 0.8], [0.7, 1.2, 1.0]])
def test_token_stats_extremes_ignore_the_padding(values):
    """Padding holds ``pad`` (1 for RLSD's weights); the extremes are the real tokens' whether they lie on one side of
    it (the padding-filled recount) or both (the direct one)."""
    x = torch.tensor([[values[0], values[1], 1.0], [values[2], 1.0, 1.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    stats = token_stats(x, mask, torch.tensor([True, True]), "w", token_counts(mask), pad=1.0)
    assert (stats["w_min"], stats["w_max"]) == (pytest.approx(min(values)), pytest.approx(max(values)))


def test_rlsd_agrees_with_the_sdar_repo_transform_on_a_random_batch():
    """methods/rlsd.py against the test-only transcription of the SDAR repo's function (tests/reference_rlsd.py),
    every row with a teacher context, at λ(10) = 0.4: its exp2 form and block loop change nothing beyond float32
    rounding (perf/advantages.py times the two)."""
    from reference_rlsd import rlsd_step_as_trained
    from synthetic import random_batch

    batch = random_batch(rows=700, response_len=64, group_size=8, max_segments=6, seed=3)
    batch = batch.with_columns(teacher_available=torch.ones(batch.num_rows, dtype=torch.bool))
    grpo_tokens = registry.build("grpo").advantages(batch)[0]
    theirs, _ = rlsd_step_as_trained(grpo_tokens, batch.old_logp, batch.teacher_logp, batch.response_mask,
                                     0.4, 0.2)
    ours, diag = registry.build("rlsd").advantages(batch, step=10)
    assert (ours.double() - theirs.double()).abs().max() <= 1e-6 * max(1.0, float(theirs.abs().max()))
    # the gap the SDAR trainer logs beside the transform: its mean and its root mean square ("gap_std" there),
    # from our mean and (unbiased) std. Ours averages over the reweighted rows (A != 0), so theirs gets those rows
    active = registry.build("grpo").episode_advantage(batch) != 0
    _, logged = rlsd_step_as_trained(grpo_tokens[active], batch.old_logp[active], batch.teacher_logp[active],
                                     batch.response_mask[active], 0.4, 0.2)
    n = int(batch.response_mask[active].sum())
    assert diag["gap_mean"] == pytest.approx(logged["rlsd/teacher_student_gap_mean"], rel=1e-5)
    rms = math.sqrt(diag["gap_std"] ** 2 * (n - 1) / n + diag["gap_mean"] ** 2)
    assert rms == pytest.approx(logged["rlsd/teacher_student_gap_std"], rel=1e-5)


@pytest.mark.parametrize("junk", [float("nan"), float("inf"), -float("inf")])
def test_rlsd_ignores_non_finite_padding(junk):
    """Padding holds no log-prob anyone reads: a NaN or ±inf there changes neither Ã (0 on padding) nor the
    diagnostics (the masked product would carry it; the transform falls back to a select)."""
    rows = pair(RLSD_GAPS)
    rows[1]["tokens"], rows[1]["gap"] = 2, RLSD_GAPS[:2]
    clean = batch_from_rows(rows, response_len=4)
    teacher = clean.teacher_logp.clone()
    teacher[1, 2:] = junk
    adv, diag = registry.build("rlsd").advantages(clean.with_columns(teacher_logp=teacher), step=0)
    expected, expected_diag = registry.build("rlsd").advantages(clean, step=0)
    assert torch.equal(adv, expected)
    assert diag == pytest.approx(expected_diag)


def test_rlsd_redoes_only_the_blocks_with_non_finite_padding(monkeypatch):
    """Row blocks are checked for non-finite padding once, after the loop: junk in two of five blocks leaves Ã and
    the diagnostics as the clean batch gives them, and the clean blocks are not recomputed."""
    from synthetic import random_batch

    import methods.rlsd as rlsd_module

    monkeypatch.setattr(rlsd_module, "BLOCK_ROWS", 8)
    clean = random_batch(rows=40, response_len=16, group_size=4, max_segments=3, seed=5)
    mask = clean.response_mask
    padded = [row for row in range(40) if not bool(mask[row].all())]
    junk_rows = [next(r for r in padded if 8 <= r < 16), next(r for r in padded if 32 <= r < 40)]
    teacher = clean.teacher_logp.clone()
    teacher[junk_rows[0]][~mask[junk_rows[0]]] = float("nan")
    teacher[junk_rows[1]][~mask[junk_rows[1]]] = float("inf")
    exact_blocks = []
    original = rlsd_module._masked_gap

    def spy(batch, block, keep, into, exact_padding):
        if exact_padding:
            exact_blocks.append(block.start)
        return original(batch, block, keep, into, exact_padding)

    monkeypatch.setattr(rlsd_module, "_masked_gap", spy)
    adv, diag = registry.build("rlsd").advantages(clean.with_columns(teacher_logp=teacher), step=3)
    assert exact_blocks == [8, 32]
    expected, expected_diag = registry.build("rlsd").advantages(clean, step=3)
    assert torch.equal(adv, expected)
    assert diag == pytest.approx(expected_diag)


def test_rlsd_logs_zeros_when_no_row_is_reweighted():
    """A batch whose groups all share one outcome (A = 0 everywhere) reweights nothing: the multiplier statistics
    are the zeros every method logs for an empty selection, not 1 − λ (λ·0 + 1 − λ)."""
    batch = batch_from_rows([dict(group=0, traj=t, step=0, ret=10.0, tokens=3, gap=0.3) for t in range(2)])
    for name in ("rlsd", "sharpo", "stepopsd"):
        _, diag = registry.build(name).advantages(batch)
        assert [diag[f"multiplier_{k}"] for k in ("mean", "std", "min", "max")] == [0.0] * 4, name
        assert diag["reweighted_row_frac"] == 0.0


def test_segment_statistics_leave_out_rows_without_tokens():
    """A reweighted row with no response token moves nothing: its gap (0) and multiplier stay out of the gap and
    multiplier statistics and of the reweighted share, for the segment-level methods as for RLSD."""
    rows = [dict(group=0, traj=0, step=0, ret=10.0, tokens=2, gap=0.4),
            dict(group=0, traj=0, step=1, ret=10.0, tokens=0),
            dict(group=0, traj=1, step=0, ret=0.0, tokens=2, gap=0.4)]
    batch = batch_from_rows(rows, response_len=2)
    sharpo = registry.build("sharpo").advantages(batch)[1]
    assert (sharpo["gap_mean"], sharpo["gap_min"]) == (pytest.approx(0.4), pytest.approx(0.4))
    stepopsd = registry.build("stepopsd").advantages(batch)[1]
    assert (stepopsd["gap_mean"], stepopsd["gap_min"]) == (pytest.approx(0.8), pytest.approx(0.8))  # token sums
    for name in ("sharpo", "stepopsd", "rlsd", "agentopsd"):
        assert registry.build(name).advantages(batch)[1]["reweighted_row_frac"] == pytest.approx(2 / 3), name
