"""AgentOPSD against the authors' functions (methods/FORMULAS.md#agentopsd).

``published_group_mean_v0`` and ``published_turn_advantage`` transcribe, line by line in plain loops,
``compute_group_mean_v0`` and the belief_mult path of ``compute_opsd_turn_advantage`` from
``ZethWang/AgentOPSD`` @ b602d89, ``verl/trainer/ppo/opsd_utils.py`` (the paths the run script takes; the tether,
anchoring, group-norm and telescoping paths are not part of this method and raise here). The published function
computes in the dtype of the log-probs; the reference is fed float64 log-probs, like the method.
"""
from __future__ import annotations

from collections import defaultdict

import pytest
import torch
from synthetic import batch_from_rows, ragged_batch

from harness.core import registry
from harness.core.typed import ConfigError
from methods.grpo import episode_advantage


# ----------------------------------------------------------------------------- the published code, transcribed
def published_group_mean_v0(token_level_rewards, response_mask, index, traj_index):
    scores = (token_level_rewards * response_mask.to(token_level_rewards.dtype)).sum(dim=-1)
    bsz = scores.shape[0]
    id2score, id2mean, seen_pairs = defaultdict(list), {}, set()
    for i in range(bsz):
        if (index[i], traj_index[i]) in seen_pairs:
            continue
        id2score[index[i]].append(scores[i])
        seen_pairs.add((index[i], traj_index[i]))
    for idx in id2score:
        t = torch.tensor(id2score[idx], dtype=torch.float32)
        id2mean[idx] = torch.mean(t)
    v0 = torch.tensor([float(id2mean[index[i]]) for i in range(bsz)], dtype=scores.dtype)
    return torch.clamp(v0, 1e-4, 1.0 - 1e-4)


def discounted_cumsum_loop(x, gamma):
    if gamma >= 1.0:
        return torch.cumsum(x, dim=0)
    out, acc = torch.empty_like(x), torch.zeros_like(x[0])
    for t in range(x.shape[0]):
        acc = gamma * acc + x[t]
        out[t] = acc
    return out


def published_turn_advantage(student_log_probs, teacher_log_probs, response_mask, traj_uid, turn_step,
                             v0_per_traj, seq_advantage_per_row, eps=1e-6, center_delta=False,
                             belief_decay_gamma=1.0, belief_mult=True, mult_lambda=1.0, mult_band=0.2,
                             belief_gate=True, mult_signed=True, signed=False):
    if not belief_mult:
        raise NotImplementedError("only the belief_mult path is part of the method")
    dtype = student_log_probs.dtype
    bsz = student_log_probs.shape[0]
    rmask = response_mask.to(dtype)
    delta_t = (teacher_log_probs - student_log_probs) * rmask
    delta_turn = delta_t.sum(dim=-1)
    V0 = torch.clamp(v0_per_traj.to(dtype), 1e-4, 1.0 - 1e-4)
    traj_to_rows = defaultdict(list)
    for i in range(bsz):
        traj_to_rows[traj_uid[i]].append(i)
    A_row = torch.zeros(bsz, dtype=dtype)
    for rows in traj_to_rows.values():
        rows_sorted = sorted(rows, key=lambda r: int(turn_step[r]))
        idx = torch.tensor(rows_sorted, dtype=torch.long)
        v0_ep = V0[idx[0]]
        logit_v0 = torch.log(v0_ep / (1.0 - v0_ep))
        d_seq = delta_turn[idx]
        if center_delta and d_seq.numel() > 1:
            d_seq = d_seq - d_seq.mean()
        cum_d = discounted_cumsum_loop(d_seq, float(belief_decay_gamma))
        V_k = torch.clamp(torch.sigmoid(logit_v0 + cum_d), eps, 1.0 - eps)
        V_prev = torch.cat([v0_ep.view(1), V_k[:-1]], dim=0)
        A_seq = V_k - V_prev
        a_seq_turn = seq_advantage_per_row[idx].to(dtype)
        b = float(mult_band)
        if signed:
            q_k = A_seq if belief_gate else d_seq
            q_mean = q_k.mean()
            q_std = q_k.std(unbiased=False) if q_k.numel() > 1 else torch.zeros_like(q_mean)
            z_k = (q_k - q_mean) / (q_std + eps)
            m_k = torch.clamp(1.0 + b * torch.sign(a_seq_turn) * z_k, 1.0 - b, 1.0 + b)
        else:
            s_k = A_seq.abs() if belief_gate else d_seq.abs()
            s_mean = s_k.mean()
            s_std = s_k.std(unbiased=False) if s_k.numel() > 1 else torch.zeros_like(s_mean)
            m_k = torch.clamp(1.0 + b * (s_k - s_mean) / (s_std + eps), 1.0 - b, 1.0 + b)
        lam = float(mult_lambda)
        dir_seq = a_seq_turn if mult_signed else a_seq_turn.abs()
        A_row[idx] = (dir_seq * ((1.0 - lam) + lam * m_k)).to(dtype)
    return A_row.unsqueeze(-1) * rmask


def published(batch, options: dict, penalty: float = 0.1, step: int = 0):
    """The trainer's call: token rewards (score on the last valid token), V_0, the GRPO advantage per row."""
    mask = batch.response_mask
    scores = batch.episode_return.double() - penalty * (~batch.action_valid).double()
    last = mask.sum(dim=1) - 1
    token_rewards = torch.zeros(mask.shape, dtype=torch.float64)
    token_rewards[torch.arange(batch.num_rows), last] = scores
    index, traj = batch.group_id.tolist(), batch.traj_id.tolist()
    source = options.get("v0_source", "group_mean_score")
    if source == "group_mean_score":
        v0 = published_group_mean_v0(token_rewards, mask, index, traj)
    elif source == "group_success_rate":
        won = torch.zeros(mask.shape, dtype=torch.float64)
        won[torch.arange(batch.num_rows), last] = batch.success.double()
        v0 = published_group_mean_v0(won, mask, index, traj)
    else:
        v0 = torch.full((batch.num_rows,), options["v0_prior"], dtype=torch.float64)
    seq_adv = episode_advantage(batch, penalty, True, True, 1e-6)
    lam = options.get("mult_lambda", 0.5)
    warmdown = options.get("warmdown_steps")
    if warmdown is not None:
        lam = 0.0 if step >= warmdown else lam * (1.0 - step / warmdown)
    keys = ("center_delta", "belief_decay_gamma", "mult_band", "belief_gate", "mult_signed")
    return published_turn_advantage(
        batch.old_logp.double(), batch.teacher_logp.double(), mask, traj, batch.step_idx.tolist(), v0, seq_adv,
        mult_lambda=lam, signed=options.get("signed", True), **{k: options[k] for k in keys if k in options})


# ------------------------------------------------------------------------------------------------- the tests
CASES = [
    {},  # the run script: turn granularity, belief_mult, signed, λ 0.5, band 0.2, V_0 = group mean of the score
    {"signed": False},
    {"belief_gate": False, "mult_band": 0.5},
    {"mult_signed": False, "mult_lambda": 1.0},
    {"center_delta": True, "belief_decay_gamma": 0.9},
    {"v0_source": "group_success_rate"},
    {"v0_source": "prior", "v0_prior": 0.3, "warmdown_steps": 10},
]


@pytest.mark.parametrize("options", CASES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "defaults")
@pytest.mark.parametrize("seed,scale", [(0, 10.0), (1, 1.0), (2, 0.5)])
def test_agrees_with_the_published_functions(options, seed, scale):
    batch = ragged_batch(seed, max_segments=50, scale=scale)
    assert (batch.n_steps == 50).any() or int(batch.n_steps.max()) > 30  # long rollouts are covered
    ours, _ = registry.build("agentopsd", options).advantages(batch, step=4)
    reference = published(batch, options, step=4)
    assert (ours.double() - reference).abs().max() <= 1e-5


def test_row_order_does_not_matter():
    batch = ragged_batch(3, step_major=True)
    shuffled = batch.select(torch.randperm(batch.num_rows, generator=torch.Generator().manual_seed(0)))
    method = registry.build("agentopsd", {"v0_source": "group_success_rate"})
    a, _ = method.advantages(batch)
    b, _ = method.advantages(shuffled)
    order = {(t, s): i for i, (t, s) in enumerate(zip(batch.traj_id.tolist(), batch.step_idx.tolist()))}
    back = torch.tensor([order[(t, s)] for t, s in zip(shuffled.traj_id.tolist(), shuffled.step_idx.tolist())])
    assert torch.allclose(a[back], b, atol=1e-6)


def test_published_v0_saturates_on_scaled_returns():
    """The published quirk: V_0 from 10·won is clamped to 1e-4 or 1 − 1e-4; the success rate is not."""
    batch = ragged_batch(4, scale=10.0)
    _, published_diag = registry.build("agentopsd").advantages(batch)
    _, corrected_diag = registry.build("agentopsd", {"v0_source": "group_success_rate"}).advantages(batch)
    assert published_diag["v0_clamped_frac"] == 1.0
    assert corrected_diag["v0_clamped_frac"] < 1.0


def test_one_turn_rollouts_keep_grpo_advantage():
    batch = ragged_batch(5, max_segments=1)
    ours, _ = registry.build("agentopsd").advantages(batch)
    grpo, _ = registry.build("grpo").advantages(batch)
    assert torch.equal(ours, grpo)  # z = 0 on a one-turn rollout, so m = 1


def test_bad_options_are_refused():
    with pytest.raises(ConfigError, match="mult_band"):
        registry.build("agentopsd", {"mult_band": 1.0})


@pytest.mark.parametrize("options", [{}, {"signed": False}])
def test_band_clip_share_counts_the_reweighted_rows_only(options):
    """band_clip_frac is the share of the reweighted rows (A != 0) whose m sits on the band's edge, as the
    multiplier statistics are: a group with one outcome (A = 0) neither dilutes it nor adds to it."""
    rows = []
    for group, returns in ((0, (10.0, 0.0)), (1, (10.0, 10.0))):
        for traj, ret in enumerate(returns):
            rows += [dict(group=group, traj=2 * group + traj, step=s, ret=ret, tokens=1, gap=g)
                     for s, g in enumerate([2.0, -2.0, 0.0])]
    batch = batch_from_rows(rows)
    method = registry.build("agentopsd", options)
    adv = method.episode_advantage(batch)
    m, _, _ = method.multiplier(batch, adv)
    clipped = (m <= 0.8) | (m >= 1.2)
    expected = float(clipped[adv != 0].double().mean())
    assert 0 < expected < 1
    assert method.advantages(batch)[1]["band_clip_frac"] == pytest.approx(expected)
