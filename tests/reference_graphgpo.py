"""TEST-ONLY transcription of the GraphGPO authors' advantage code, to check methods/graphgpo.py against.

Never imported by the harness. Transcribed line by line (plain loops, dicts, numpy, as published) from
langfengQ/verl-agent PR #256, commit 234a913 (fetchable fork ``zzj1111/alfworldauto``):

- ``recipe/GraphGPO/core_graph.py``: ``to_hashable``, ``ComplexGraph`` (``add_edge``, ``from_data`` with similarity
  off, ``all_to_target_shortest_paths``, ``calculate_path``, ``Calculate_all_shortest_path``),
  ``compute_graph_path_returns``, ``compute_graphgpo_outcome_advantage``;
- ``gigpo/core_gigpo.py`` (which core_graph imports): ``episode_norm_reward``, ``build_step_group`` (exact match
  branch), ``step_norm_reward``;
- ``recipe/GraphGPO/graphgpo_ray_trainer.py``: ``apply_invalid_action_penalty`` (the penalty on the token score and
  on ``step_rewards``) and the order of calls in ``fit``.

Left out because they never change an advantage: ``first_state`` voting, the stored paths' use, printing, and
``adjust_batch`` (it runs after the advantage). ``DataProto`` is replaced by :class:`Data`, which has the two dicts
the functions read. ``dtype`` is a test-only knob: the published code computes in float32; the tests also run it in
float64 (see methods/FORMULAS.md#graphgpo, float32 ties).
"""
from __future__ import annotations

import heapq
import uuid
from collections import defaultdict

import numpy as np
import torch

from harness.core.batch import SUCCESS_STATE


class Data:
    def __init__(self, batch: dict, non_tensor_batch: dict):
        self.batch, self.non_tensor_batch = batch, non_tensor_batch


# ------------------------------------------------------------------------ core_graph.py
def to_hashable(x):
    if isinstance(x, (int, float, str, bool)):
        return x
    elif isinstance(x, (np.integer, np.floating)):
        return x.item()
    elif isinstance(x, np.ndarray):
        return tuple(x.flatten())
    elif isinstance(x, (list, tuple)):
        return tuple(to_hashable(e) for e in x)
    elif isinstance(x, dict):
        return tuple(sorted((k, to_hashable(v)) for k, v in x.items()))
    else:
        raise TypeError(f"Unsupported type: {type(x)}")


def nested_defaultdict():
    return defaultdict(list)


class ComplexGraph:
    def __init__(self):
        self.graph = defaultdict(nested_defaultdict)
        self.nodes = set()
        self.final_state = None
        self.shortest_path_to_final = None

    def add_edge(self, u, v, **attrs):
        self.graph[to_hashable(u)][to_hashable(v)].append(attrs)
        self.nodes.update([u, v])

    @classmethod
    def from_data(cls, data):
        Gs = {}
        for uid in set(data.non_tensor_batch['uid']):
            g = cls()
            uid_indices = np.where(data.non_tensor_batch['uid'] == uid)[0]
            for i in uid_indices:
                weight = 1.0
                anchor_h = to_hashable(data.non_tensor_batch['anchor_obs'][i])  # canonicalize, similarity off
                next_h = to_hashable(data.non_tensor_batch['next_obs'][i])
                g.add_edge(anchor_h, next_h, traj_uid=data.non_tensor_batch['traj_uid'][i], data_id=i, weight=weight)
            g.final_state = to_hashable('success')
            Gs[uid] = g
        return Gs

    @staticmethod
    def Calculate_all_shortest_path(Gs: dict):
        for key in Gs.keys():
            Gs[key].calculate_path()

    def all_to_target_shortest_paths(self, target, weight_key="weight"):
        if target is not None:
            target = to_hashable(target)
        reverse_graph = defaultdict(list)
        for u in self.graph:
            for v in self.graph[u]:
                for attr in self.graph[u][v]:
                    w = attr.get(weight_key, 1)
                    reverse_graph[v].append((u, w))
        distances = {n: float("inf") for n in self.nodes}
        paths = {n: [] for n in self.nodes}
        pq = [(0, target, [target])]
        distances[target] = 0
        while pq:
            cost, node, path = heapq.heappop(pq)
            if cost > distances[node]:
                continue
            for neighbor, w in reverse_graph[node]:
                new_cost = cost + w
                if new_cost < distances[neighbor]:
                    distances[neighbor] = new_cost
                    paths[neighbor] = [neighbor] + path
                    heapq.heappush(pq, (new_cost, neighbor, [neighbor] + path))
        far_distance = 0
        for key, value in distances.items():
            if (value != float("inf")) and (value > far_distance):
                far_distance = value
        for key, value in distances.items():
            if value == float("inf"):
                distances[key] = far_distance + 1
        return distances, paths

    def calculate_path(self, weight_key="weight"):
        self.shortest_path_to_final = self.all_to_target_shortest_paths(self.final_state, weight_key="weight")


def compute_graph_path_returns(batch, Gs, gamma, normalize_distance, dtype=np.float32):
    rewards = batch.non_tensor_batch['rewards'].astype(dtype)
    traj_uids = batch.non_tensor_batch['traj_uid']
    uids = batch.non_tensor_batch['uid']
    active_masks = batch.non_tensor_batch['active_masks'].astype(np.float32)
    next_obs_ = batch.non_tensor_batch['next_obs']
    old_obs_ = batch.non_tensor_batch['anchor_obs']
    returns_by_traj = {}
    unique_traj_uids = np.unique(traj_uids)
    for uid in unique_traj_uids:
        traj_indices = np.where(traj_uids == uid)[0]
        uid_uid = uids[traj_indices[0]]
        traj_rewards = rewards[traj_indices]
        traj_active_masks = active_masks[traj_indices]
        new_obs = next_obs_[traj_indices]
        old_obs = old_obs_[traj_indices]
        assert traj_active_masks.all(), "active_masks should be all 1s for the same trajectory"
        traj_returns = np.zeros_like(traj_rewards)
        g = Gs[uid_uid]
        distances_dict, distances_path_dict = g.shortest_path_to_final
        for t in range(len(traj_rewards)):
            weight = 1.0
            new_h = to_hashable(new_obs[t])
            old_h = to_hashable(old_obs[t])
            if normalize_distance:
                traj_returns[t] = 10 * gamma ** (distances_dict[new_h] - distances_dict[old_h] + weight)
            else:
                traj_returns[t] = 10 * gamma ** (distances_dict[new_h] + weight - 1)
        returns_by_traj[uid] = traj_returns
    all_returns = np.zeros_like(rewards)
    for i, uid in enumerate(traj_uids):
        traj_indices = np.where(traj_uids == uid)[0]
        idx_in_traj = np.where(traj_indices == i)[0][0]
        all_returns[i] = returns_by_traj[uid][idx_in_traj]
    return torch.tensor(all_returns, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype)


def compute_graphgpo_outcome_advantage(token_level_rewards, step_rewards, response_mask, anchor_obs, index,
                                       traj_index, epsilon=1e-6, step_advantage_w=1.0, episode_advantage_w=1.0,
                                       mode="mean_std_norm"):
    if mode == "mean_std_norm":
        remove_std = False
    elif mode == "mean_norm":
        remove_std = True
    else:
        raise ValueError(f"Unknown mode: {mode}")
    step_group_uids = build_step_group(anchor_obs, index)
    step_advantages = step_norm_reward(step_rewards, response_mask, step_group_uids, epsilon, remove_std)
    if episode_advantage_w != 0.0:
        episode_advantages = episode_norm_reward(token_level_rewards, response_mask, index, traj_index, epsilon,
                                                 remove_std)
        scores = step_advantage_w * step_advantages + episode_advantage_w * episode_advantages
    else:
        scores = step_advantage_w * step_advantages
    return scores, scores


# ------------------------------------------------------------------------ gigpo/core_gigpo.py
def episode_norm_reward(token_level_rewards, response_mask, index, traj_index, epsilon=1e-6, remove_std=True,
                        compute_mean_std_cross_steps=True):
    response_length = token_level_rewards.shape[-1]
    scores = token_level_rewards.sum(dim=-1)
    id2score = defaultdict(list)
    id2mean = {}
    id2std = {}
    seen_pairs = set()
    with torch.no_grad():
        bsz = scores.shape[0]
        for i in range(bsz):
            if (index[i], traj_index[i]) in seen_pairs:
                continue
            id2score[index[i]].append(scores[i])
            if not compute_mean_std_cross_steps:
                seen_pairs.add((index[i], traj_index[i]))
        for idx in id2score:
            if len(id2score[idx]) == 1:
                id2mean[idx] = torch.tensor(0.0)
                id2std[idx] = torch.tensor(1.0)
            elif len(id2score[idx]) > 1:
                id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
                id2std[idx] = torch.std(torch.tensor([id2score[idx]]))
            else:
                raise ValueError(f"no score in prompt index: {idx}")
        for i in range(bsz):
            if remove_std:
                scores[i] = scores[i] - id2mean[index[i]]
            else:
                scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        episode_advantages = scores.unsqueeze(-1).tile([1, response_length]) * response_mask
    return episode_advantages


def build_step_group(anchor_obs, index):
    step_group_uids = np.empty(len(anchor_obs), dtype=object)
    unique_indices = np.unique(index)
    for idx in unique_indices:
        indices = np.where(index == idx)[0]
        obs_group = anchor_obs[indices]
        clusters = defaultdict(list)
        for i, obs in enumerate(obs_group):
            clusters[to_hashable(obs)].append(indices[i])
        for obs, original_indices in clusters.items():
            uid = str(uuid.uuid4())
            for original_idx in original_indices:
                step_group_uids[original_idx] = uid
    return step_group_uids


def step_norm_reward(step_rewards, response_mask, index, epsilon=1e-6, remove_std=True):
    response_length = response_mask.shape[-1]
    scores = step_rewards.clone()
    id2score = defaultdict(list)
    id2mean = {}
    id2std = {}
    with torch.no_grad():
        bsz = scores.shape[0]
        for i in range(bsz):
            id2score[index[i]].append(scores[i])
        for idx in id2score:
            if len(id2score[idx]) == 1:
                id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
                id2std[idx] = torch.tensor(1.0)
            elif len(id2score[idx]) > 1:
                id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
                id2std[idx] = torch.std(torch.tensor([id2score[idx]]))
            else:
                raise ValueError(f"no score in prompt index: {idx}")
        for i in range(bsz):
            if remove_std:
                scores[i] = scores[i] - id2mean[index[i]]
            else:
                scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        step_advantages = scores.unsqueeze(-1).tile([1, response_length]) * response_mask
    return step_advantages


# ------------------------------------------------------------------------ graphgpo_ray_trainer.py (fit)
def to_data(batch, dtype=np.float32) -> Data:
    """The rollout's DataProto: ids as strings, states as they are; the state after a won rollout's last step is
    the string 'success' (rollout_loop.py); the token score R sits on the last response token."""
    lengths = batch.response_mask.sum(dim=1)
    scores = torch.zeros(batch.response_mask.shape, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype)
    scores[torch.arange(len(lengths)), (lengths - 1).clamp(min=0)] = batch.episode_return.to(scores.dtype)
    next_obs = np.array(["success" if h == SUCCESS_STATE else h for h in batch.next_obs_hash.tolist()], dtype=object)
    non_tensor = {
        'uid': np.array([str(g) for g in batch.group_id.tolist()], dtype=object),
        'traj_uid': np.array([str(t) for t in batch.traj_id.tolist()], dtype=object),
        'anchor_obs': np.array(batch.obs_hash.tolist(), dtype=object),
        'next_obs': next_obs,
        'rewards': batch.step_reward.numpy(),
        'active_masks': np.ones(len(lengths), dtype=bool),
        'is_action_valid': batch.action_valid.numpy(),
    }
    return Data({'token_level_scores': scores, 'response_mask': batch.response_mask.float()}, non_tensor)


def apply_invalid_action_penalty(data, invalid_action_penalty_coef):
    reward_tensor = data.batch['token_level_scores']
    step_rewards = data.batch['step_rewards']
    lengths = data.batch['response_mask'].sum(dim=1).long()
    for i in range(len(lengths)):
        action_valids = np.float32(data.non_tensor_batch['is_action_valid'][i])
        # published: dtype=torch.float32; the test-only float64 run keeps the penalty in float64 too
        action_invalids = torch.tensor(1 - action_valids, dtype=step_rewards.dtype)
        reward_tensor[i, lengths[i] - 1] -= invalid_action_penalty_coef * action_invalids
        step_rewards[i] -= invalid_action_penalty_coef * action_invalids
    return data


def published(batch, gamma=0.10, penalty=0.1, mode="mean_std_norm", normalize_distance=False,
              step_advantage_w=1.0, episode_advantage_w=1.0, dtype=np.float32) -> torch.Tensor:
    """GraphGPO's token advantages for ``batch`` as the published trainer computes them."""
    data = to_data(batch, dtype)
    Gs = ComplexGraph.from_data(data)
    ComplexGraph.Calculate_all_shortest_path(Gs)
    data.batch['step_rewards'] = compute_graph_path_returns(data, Gs, gamma, normalize_distance, dtype)
    data = apply_invalid_action_penalty(data, penalty)
    scores, _ = compute_graphgpo_outcome_advantage(
        data.batch['token_level_scores'], data.batch['step_rewards'], data.batch['response_mask'],
        data.non_tensor_batch['anchor_obs'], data.non_tensor_batch['uid'], data.non_tensor_batch['traj_uid'],
        step_advantage_w=step_advantage_w, episode_advantage_w=episode_advantage_w, mode=mode)
    return scores
