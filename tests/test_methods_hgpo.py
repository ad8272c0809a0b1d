"""HGPO against the authors' functions (methods/FORMULAS.md#hgpo).

The ``published_*`` functions transcribe, line by line in plain loops, verl-agent's ``recipe/hgpo/core_hgpo.py``
(snapshot ``xlan156/verl-agent``): ``compute_step_discounted_returns``, ``trajectory_advantages`` and
``hgpo_advantage_estimate``, plus the step-reward part of ``apply_invalid_action_penalty``
(``recipe/hgpo/hgpo_ray_trainer.py``). They compute in float32, as published, unless given another ``dtype``.

Two kinds of batch: dense rewards (no two returns tie, the defaults' γ = 0.95 and p = 0.1) and sparse integer
rewards with γ = 1 and a dyadic penalty (many exact ties, all-equal groups, advantages of exactly 0): float32 holds
those values exactly, so the published code runs in float32 as written. On the dense batches the transcription runs
in float64 (its ``dtype`` argument), since float32's rounding alone moves the published result by up to 4e-5
there; see the quirk in methods/FORMULAS.md#hgpo.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch
from synthetic import batch_from_rows, ragged_batch

from harness.core import registry


# ----------------------------------------------------------------------------- the published code, transcribed
def published_step_returns(rewards, traj_uids, gamma, dtype=torch.float32):
    rewards = np.asarray(rewards, dtype=np.float32 if dtype == torch.float32 else np.float64)
    traj_uids = np.asarray(traj_uids)
    returns_by_traj = {}
    for uid in np.unique(traj_uids):
        traj_rewards = rewards[np.where(traj_uids == uid)[0]]
        traj_returns = np.zeros_like(traj_rewards)
        running_return = 0
        for t in reversed(range(len(traj_rewards))):
            running_return = traj_rewards[t] + gamma * running_return
            traj_returns[t] = running_return
        returns_by_traj[uid] = traj_returns
    all_returns = np.zeros_like(rewards)
    for i, uid in enumerate(traj_uids):
        traj_indices = np.where(traj_uids == uid)[0]
        all_returns[i] = returns_by_traj[uid][np.where(traj_indices == i)[0][0]]
    return torch.tensor(all_returns, dtype=dtype)


def published_trajectory_advantages(token_level_rewards, response_mask, index, traj_index, epsilon, remove_std):
    response_length = token_level_rewards.shape[-1]
    scores = token_level_rewards.sum(dim=-1)
    id2score, id2mean, id2std = defaultdict(list), {}, {}
    for i in range(scores.shape[0]):  # compute_mean_std_cross_steps=True: every row counts
        id2score[index[i]].append(scores[i])
    for idx in id2score:
        if len(id2score[idx]) == 1:
            id2mean[idx], id2std[idx] = torch.tensor(0.0), torch.tensor(1.0)
        else:
            id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
            id2std[idx] = torch.std(torch.tensor([id2score[idx]]))
    for i in range(scores.shape[0]):
        if remove_std:
            scores[i] = scores[i] - id2mean[index[i]]
        else:
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
    return scores.unsqueeze(-1).tile([1, response_length]) * response_mask


def published_hgpo(token_level_rewards, step_rewards, response_mask, anchor_obs, index, traj_index, history_length,
                   epsilon=1e-6, mode="mean_std_norm", length_weight_alpha=1.0, base_group=False, dtype=torch.float32):
    response_length = response_mask.shape[-1]
    rewards_all = step_rewards.detach().to(dtype=dtype)
    all_step_adv = torch.zeros(anchor_obs.shape[0], dtype=dtype)
    base_adv_scalars = None
    if base_group:
        base_adv = published_trajectory_advantages(token_level_rewards, response_mask, index, traj_index, epsilon,
                                                   remove_std=(mode == "mean_norm")).to(dtype)
        mask_sum = response_mask.sum(dim=1).clamp(min=1e-8)
        base_adv_scalars = (base_adv * response_mask).sum(dim=1) / mask_sum

    def aggregate_items(items):
        if not items:
            return torch.zeros((), dtype=dtype)
        advs = torch.stack([a.to(dtype) for _, a in items], dim=0)
        ks_t = torch.tensor([k for k, _ in items], dtype=dtype)
        valid_mask = advs != 0
        if not valid_mask.any():
            return torch.zeros((), dtype=dtype)
        w_raw = (ks_t[valid_mask] + 1) ** length_weight_alpha
        w = w_raw / (w_raw.sum() + epsilon)
        return (w * advs[valid_mask]).sum()

    for gid in np.unique(index):
        group_indices = np.flatnonzero(index == gid)
        group_obs, group_traj_ids = anchor_obs[group_indices], traj_index[group_indices]
        group_rewards = rewards_all.index_select(0, torch.as_tensor(group_indices, dtype=torch.long))
        uniq_traj, inv = np.unique(group_traj_ids, return_inverse=True)
        traj_positions = [[] for _ in range(len(uniq_traj))]
        for pos, t in enumerate(inv):
            traj_positions[t].append(pos)
        traj_positions = [np.asarray(p, dtype=np.int64) for p in traj_positions]
        traj_rewards = [group_rewards.index_select(0, torch.as_tensor(p, dtype=torch.long)) for p in traj_positions]
        traj_gidx = [group_indices[p] for p in traj_positions]
        traj_h = [[int(s) for s in group_obs[p]] for p in traj_positions]
        clusters = defaultdict(list)
        max_k = history_length + 1
        for ti in range(len(uniq_traj)):
            for si in range(len(traj_h[ti])):
                for k in range(1, min(max_k, si + 1) + 1):
                    clusters[(k, tuple(traj_h[ti][si - k + 1: si + 1]))].append((ti, si))
        per_step_items = defaultdict(list)
        for (k, _key), members in clusters.items():
            if len(members) <= 1:
                continue
            r = torch.stack([traj_rewards[ti][si] for (ti, si) in members], dim=0)
            mean, std = r.mean(), r.std(unbiased=False)
            a = (r - mean) / (std + epsilon) if mode == "mean_std_norm" else (r - mean)
            for j, (ti, si) in enumerate(members):
                per_step_items[(ti, si)].append((k, a[j]))
        for ti in range(len(uniq_traj)):
            for si in range(len(traj_h[ti])):
                global_idx = int(traj_gidx[ti][si])
                items = per_step_items.get((ti, si), [])
                if base_group and base_adv_scalars is not None:
                    items = [(0, base_adv_scalars[global_idx])] + items
                all_step_adv[global_idx] = aggregate_items(items)
    return all_step_adv.unsqueeze(-1).expand(-1, response_length) * response_mask


def published(batch, gamma=0.95, penalty=0.1, dtype=torch.float32, **options):
    """The trainer's data flow: returns, then the invalid-action penalty on them and on the episode score.
    ``dtype`` replaces the published float32 (float64: the formula without float32's rounding)."""
    mask = batch.response_mask.to(dtype)
    invalid = (~batch.action_valid).to(dtype)
    returns = published_step_returns(batch.step_reward.numpy(), batch.traj_id.numpy(), gamma, dtype)
    token_rewards = torch.zeros(mask.shape, dtype=dtype)
    last = mask.sum(dim=1).long() - 1
    token_rewards[torch.arange(batch.num_rows), last] = batch.episode_return.to(dtype) - penalty * invalid
    return published_hgpo(token_rewards, returns - penalty * invalid, mask, batch.obs_hash.numpy(),
                          batch.group_id.numpy(), batch.traj_id.numpy(), options.pop("history_length", 2),
                          dtype=dtype, **options)


# ------------------------------------------------------------------------------------------------- the tests
# base_group only on the tie batches: with dense rewards a one-rollout group whose actions were all valid has equal
# scores, which float32 does not average exactly (the quirk in methods/FORMULAS.md#hgpo)
DENSE_CASES = [{}, {"mode": "mean_norm"}, {"history_length": 4, "length_weight_alpha": 0.0}]
TIE_CASES = [{}, {"mode": "mean_norm"}, {"history_length": 0}, {"history_length": 4, "length_weight_alpha": 2.0},
             {"base_group": True}, {"base_group": True, "mode": "mean_norm"}]


def compare(batch, options, gamma, penalty, dtype=torch.float32):
    ours, _ = registry.build("hgpo", {**options, "gamma": gamma, "invalid_action_penalty": penalty}).advantages(batch)
    reference = published(batch, gamma=gamma, penalty=penalty, dtype=dtype, **dict(options))
    assert reference.abs().max() > 0.1  # the reference is not trivially zero
    return float((ours - reference).abs().max())


@pytest.mark.parametrize("options", DENSE_CASES, ids=str)
@pytest.mark.parametrize("seed", [0, 1])
def test_agrees_with_the_published_code_dense_rewards(options, seed):
    batch = ragged_batch(seed, max_segments=50, reward="dense")
    # float64: in float32 the published code's own rounding reaches 4e-5 where a group's std is small
    assert compare(batch, options, gamma=0.95, penalty=0.1, dtype=torch.float64) <= 1e-5


@pytest.mark.parametrize("options", TIE_CASES, ids=str)
@pytest.mark.parametrize("seed", [2, 3])
def test_agrees_with_the_published_code_on_ties(options, seed):
    batch = ragged_batch(seed, max_segments=50, reward="sparse", scale=10.0)
    assert compare(batch, options, gamma=1.0, penalty=0.25) <= 1e-5


def test_hand_built_history_groups():
    """Two rollouts share observations 1 → 2, a third reaches 2 from 3: at step 1 the k = 1 group has all three
    rows, the k = 2 group the first two; weights 2 and 3 (α = 1), mean_norm."""
    from synthetic import batch_from_rows

    rows = [dict(group=0, traj=t, step=s, ret=0.0, obs=o, reward=r)
            for t, obs, rew in [(0, [1, 2], [0, 4]), (1, [1, 2], [0, 2]), (2, [3, 2], [0, 0])]
            for s, (o, r) in enumerate(zip(obs, rew))]
    adv, _ = registry.build("hgpo", {"mode": "mean_norm", "gamma": 1.0}).advantages(batch_from_rows(rows))
    # step 1: k=1 group {4, 2, 0} (mean 2), k=2 group {4, 2} (mean 3); traj 2's k=2 group is a singleton
    expected_step1 = [(2 * 2 + 3 * 1) / (5 + 1e-6), (2 * 0 + 3 * -1) / (3 + 1e-6), (2 * -2) / (2 + 1e-6)]
    assert adv[[1, 3, 5], 0].tolist() == pytest.approx(expected_step1, rel=1e-6)
    # step 0: obs 1 shared by traj 0 and 1 (returns 4, 2 → ±1, weight 2); obs 3 alone → 0
    assert adv[[0, 2, 4], 0].tolist() == pytest.approx([2 / (2 + 1e-6), -2 / (2 + 1e-6), 0.0], rel=1e-6)


def test_group_size_mean_is_over_groups_as_gigpo_logs_it():
    """With no history (K = 0) HGPO's k = 1 groups are GiGPO's step groups; both log the mean group size over
    groups: sizes (4, 1, 1, 1, 1) give 8 / 5, not the row-weighted 2.5."""
    rows = [dict(group=0, traj=t, step=0, ret=10.0 * (t % 2), obs=7) for t in range(4)]
    rows += [dict(group=0, traj=t, step=1, ret=10.0 * (t % 2), obs=100 + t) for t in range(4)]
    batch = batch_from_rows(rows)
    hgpo = registry.build("hgpo", {"history_length": 0}).advantages(batch)[1]
    gigpo = registry.build("gigpo").advantages(batch)[1]
    assert hgpo["group_size_mean_k1"] == pytest.approx(8 / 5) == gigpo["step_group_size_mean"]
