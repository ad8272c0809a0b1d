"""TEST-ONLY transcription of the G2PO authors' advantage code, to check methods/g2po.py against.

Never imported by the harness. Transcribed line by line (plain loops, dicts, numpy, as published) from
``Nala-YN/G2PO`` @ 55d811a, ``g2po/core_g2po.py``: ``compute_group_aggregation_values``,
``compute_step_level_advantage``, ``compute_g2po_outcome_advantage``; its ``episode_norm_reward`` is verl-agent's,
character for character, so it is taken from tests/reference_graphgpo.py. The call order and the penalty on the token
score (not on ``step_rewards``, which is a non-tensor column there) follow ``verl/trainer/ppo/ray_trainer.py``
(``fit``, ``apply_invalid_action_penalty``).

Left out: ``adjust_batch``, which duplicates rows to fill the data-parallel ranks before the advantage (the harness
never duplicates rows; methods/FORMULAS.md#g2po). ``dtype`` is a test-only knob for the tensors the published code
builds with torch's default float32 (``torch.tensor`` of a list of Python floats, the token scores).
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from tests.reference_graphgpo import Data, episode_norm_reward

SUCCESS_REWARD = 10.0


def compute_group_aggregation_values(batch):
    episode_rewards = batch.non_tensor_batch['episode_rewards']
    response_tensor = batch.batch["responses"]
    anchor_obs = batch.non_tensor_batch["anchor_obs"]
    traj_index = batch.non_tensor_batch["traj_uid"]
    index = batch.non_tensor_batch["uid"]
    bs = response_tensor.shape[0]
    unique_index = np.unique(index)
    scores = np.zeros(bs)
    steps = np.zeros(bs)
    group_idx = np.ones(bs, dtype=int) * (-1)
    next_group_idx = np.ones(bs, dtype=int)
    for idx in unique_index:
        indices = np.where(index == idx)[0]
        unique_traj_index = np.unique(traj_index[indices])
        groups = defaultdict(list)
        obs2idx = {}
        group_count = 0
        for t_idx in unique_traj_index:
            traj_indices = np.where(traj_index == t_idx)[0]
            for step_count, traj_idx in enumerate(traj_indices):
                steps[traj_idx] = step_count
                obs = anchor_obs[traj_idx]
                if obs2idx.get(obs) is None:
                    obs2idx[obs] = group_count
                    group_idx[traj_idx] = group_count
                    groups[obs2idx[obs]].append(traj_idx)
                    group_count += 1
                else:
                    group_idx[traj_idx] = obs2idx[obs]
                    groups[obs2idx[obs]].append(traj_idx)
        group_score = np.zeros(len(groups))
        for t_idx in unique_traj_index:
            traj_indices = np.where(traj_index == t_idx)[0]
            traj_episode_rewards = episode_rewards[traj_indices]
            episode_reward = traj_episode_rewards[0]
            for step_count, traj_idx in enumerate(traj_indices):
                if step_count + 1 < len(traj_indices):
                    next_group_idx[traj_idx] = group_idx[traj_indices[step_count + 1]]
                else:
                    if episode_rewards[traj_idx] == SUCCESS_REWARD:
                        next_group_idx[traj_idx] = -1
                    else:
                        next_group_idx[traj_idx] = -2
                group_score[group_idx[traj_idx]] += (0.95 ** (len(traj_indices) - step_count)) * episode_reward
        for groupnum in range(group_count):
            for traj_idx in groups[groupnum]:
                scores[traj_idx] = group_score[groupnum] / len(groups[groupnum])
    return scores, group_idx, next_group_idx


def compute_step_level_advantage(step_rewards, response_mask, is_action_valid, index, group_idx, next_group_idx,
                                 epsilon=1e-6, mode="mean_std_norm", invalid_action_penalty=0.1,
                                 dtype=torch.float32):
    action_invalids = np.array(1 - is_action_valid, dtype=float)
    response_length = response_mask.shape[-1]
    bs = response_mask.shape[0]
    unique_index = np.unique(index)
    scores = torch.zeros(bs, dtype=dtype)
    for idx in unique_index:
        indices = np.where(index == idx)[0]
        groups = defaultdict(list)
        groupnum2score = {}
        for traj_idx in indices:
            groupnum = group_idx[traj_idx]
            groups[groupnum].append(traj_idx)
            if groupnum2score.get(groupnum) is None:
                groupnum2score[groupnum] = step_rewards[traj_idx].item()
            else:
                assert groupnum2score[groupnum] == step_rewards[traj_idx].item(), \
                    f"Step reward mismatch in group {groupnum} at traj idx {traj_idx}"
        groupnum2score[-2] = 0.0
        groupnum2score[-1] = SUCCESS_REWARD
        for groupnum in groups:
            group_indices = groups[groupnum]
            next_group_scores = [groupnum2score[next_group_idx[gi]] for gi in group_indices]
            group_action_invalids = action_invalids[group_indices]
            next_group_scores -= group_action_invalids * invalid_action_penalty
            if len(next_group_scores) > 1:
                scores_mean = torch.mean(torch.tensor(next_group_scores))
                scores_std = torch.std(torch.tensor(next_group_scores))
                for traj_idx, score in zip(groups[groupnum], next_group_scores):
                    if mode == "mean_std_norm":
                        scores[traj_idx] = (score - scores_mean) / (scores_std + epsilon)
                    else:
                        scores[traj_idx] = (score - scores_mean)
        score_gains = []
        for indice in indices:
            group_score = groupnum2score[group_idx[indice]]
            next_group_score = groupnum2score[next_group_idx[indice]]
            score_gain = next_group_score - group_score
            score_gains.append(score_gain)
        score_gain_mean = torch.mean(torch.tensor(score_gains, dtype=dtype))
        score_gain_std = torch.std(torch.tensor(score_gains, dtype=dtype))
        for traj_idx, score_gain in zip(indices, score_gains):
            if mode == "mean_std_norm":
                scores[traj_idx] += (score_gain - score_gain_mean) / (score_gain_std + epsilon)
            else:
                scores[traj_idx] += score_gain - score_gain_mean
    step_advantages = scores.unsqueeze(-1).tile([1, response_length]) * response_mask
    return step_advantages


def compute_g2po_outcome_advantage(token_level_rewards, step_rewards, response_mask, index, traj_index, group_idx,
                                   next_group_idx, is_action_valid, epsilon=1e-6, step_advantage_w=1.0,
                                   mode="mean_norm", dtype=torch.float32):
    if mode == "mean_std_norm":
        remove_std = False
    elif mode == "mean_norm":
        remove_std = True
    else:
        raise ValueError(f"Unknown mode: {mode}")
    episode_advantages = episode_norm_reward(token_level_rewards, response_mask, index, traj_index, epsilon,
                                             remove_std)
    step_advantages = compute_step_level_advantage(step_rewards, response_mask, is_action_valid, index, group_idx,
                                                   next_group_idx, epsilon, mode, dtype=dtype)
    scores = episode_advantages + step_advantage_w * step_advantages
    return scores, scores


# ------------------------------------------------------------------------ ray_trainer.py (fit)
def published(batch, penalty=0.1, mode="mean_std_norm", step_advantage_w=1.0, dtype=torch.float32) -> torch.Tensor:
    """G2PO's token advantages for ``batch`` as the published trainer computes them. The rollout loop emits a
    rollout's rows together and in step order, which compute_group_aggregation_values relies on: rows are put in
    that order here and the result is put back in the batch's order."""
    order = sorted(range(batch.num_rows), key=lambda i: (int(batch.traj_id[i]), int(batch.step_idx[i])))
    b = batch.select(order)
    mask = b.response_mask.to(dtype)
    lengths = b.response_mask.sum(dim=1)
    rows = torch.arange(len(lengths))
    scores = torch.zeros(mask.shape, dtype=dtype)
    scores[rows, (lengths - 1).clamp(min=0)] = b.episode_return.to(dtype)
    # apply_invalid_action_penalty: on the token score only (step_rewards live in non_tensor_batch)
    scores[rows, (lengths - 1).clamp(min=0)] -= penalty * torch.tensor(1 - b.action_valid.numpy().astype(np.float32))
    data = Data({"responses": mask}, {
        'episode_rewards': b.episode_return.double().numpy(),
        'anchor_obs': np.array(b.obs_hash.tolist(), dtype=object),
        'traj_uid': np.array([str(t) for t in b.traj_id.tolist()], dtype=object),
        'uid': np.array([str(g) for g in b.group_id.tolist()], dtype=object),
    })
    step_rewards, group_idx, next_group_idx = compute_group_aggregation_values(data)
    out, _ = compute_g2po_outcome_advantage(
        scores, step_rewards, mask, data.non_tensor_batch['uid'], data.non_tensor_batch['traj_uid'], group_idx,
        next_group_idx, b.action_valid.numpy(), step_advantage_w=step_advantage_w, mode=mode, dtype=dtype)
    back = torch.empty_like(out)
    back[torch.tensor(order)] = out
    return back
