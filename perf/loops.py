"""The per-row Python loops ``python -m perf.advantages`` times each vectorised method against: every formula written
the way the reference implementations write it (verl's compute_grpo_outcome_advantage, verl-agent's core_gigpo.py,
the SDAR repo's per-row code): dicts keyed by group id, one pass over the rows, per-row tensor slices for token-level
work. Slow on purpose; they are the readable statement of each formula the fast code must match.
"""
from __future__ import annotations

import math
from collections import defaultdict

import torch

PENALTY, EPS = 0.1, 1e-6


def loop_episode_adv(b, norm_by_std=True, cross_steps=True):
    """GRPO advantage per row (verl style: dict of scores per group, then one pass over the rows)."""
    n = b.num_rows
    scores = [float(b.episode_return[i]) - PENALTY * (0.0 if bool(b.action_valid[i]) else 1.0) for i in range(n)]
    members, first = defaultdict(list), {}
    for i in range(n):
        t = int(b.traj_id[i])
        if cross_steps:
            members[int(b.group_id[i])].append(scores[i])
        elif t not in first or int(b.step_idx[i]) < int(b.step_idx[first[t]]):
            first[t] = i
    for i in first.values():
        members[int(b.group_id[i])].append(scores[i])
    stats = {}
    for g, vals in members.items():
        if len(vals) == 1:
            stats[g] = (0.0, 1.0)
        else:
            m = sum(vals) / len(vals)
            stats[g] = (m, math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)))
    out = []
    for i in range(n):
        m, s = stats[int(b.group_id[i])]
        out.append((scores[i] - m) / (s + EPS) if norm_by_std else scores[i] - m)
    return out


def broadcast_rows(b, rows):
    out = torch.zeros(b.response_mask.shape)
    for i, value in enumerate(rows):
        out[i, b.response_mask[i]] = value
    return out


def loop_grpo(b):
    return broadcast_rows(b, loop_episode_adv(b))


def loop_gigpo(b, gamma=0.95):
    episode = loop_episode_adv(b, norm_by_std=False)
    by_traj = defaultdict(list)
    for i in range(b.num_rows):
        by_traj[int(b.traj_id[i])].append((int(b.step_idx[i]), i))
    returns = [0.0] * b.num_rows
    for rows in by_traj.values():
        running = 0.0
        for _, i in sorted(rows, reverse=True):
            running = float(b.step_reward[i]) + gamma * running
            returns[i] = running
    for i in range(b.num_rows):
        returns[i] -= PENALTY * (0.0 if bool(b.action_valid[i]) else 1.0)
    step_groups = defaultdict(list)
    for i in range(b.num_rows):
        step_groups[(int(b.group_id[i]), int(b.obs_hash[i]))].append(returns[i])
    out = []
    for i in range(b.num_rows):
        vals = step_groups[(int(b.group_id[i]), int(b.obs_hash[i]))]
        step_adv = 0.0 if len(vals) == 1 else returns[i] - sum(vals) / len(vals)
        out.append(episode[i] + step_adv)
    return broadcast_rows(b, out)


def row_gap(b, i):
    mask = b.response_mask[i]
    return (b.teacher_logp[i, mask] - b.old_logp[i, mask]).double(), mask


def loop_rlsd(b, step=10, lam0=0.5, warmdown=50, eps_w=0.2):
    lam = 0.0 if step >= warmdown else lam0 * (1 - step / warmdown)
    adv, out = loop_episode_adv(b), torch.zeros(b.response_mask.shape)
    for i, a in enumerate(adv):
        gap, mask = row_gap(b, i)
        if a == 0 or not bool(b.teacher_available[i]):
            out[i, mask] = a
            continue
        sign = 1.0 if a > 0 else -1.0
        weight = torch.exp(sign * gap).clamp(1 - eps_w, 1 + eps_w)
        out[i, mask] = (a * ((1 - lam) + lam * weight)).float()
    return out


def loop_sharpo(b, lam=0.05, tau=1.0):
    adv, rows = loop_episode_adv(b), []
    for i, a in enumerate(adv):
        gap, _ = row_gap(b, i)
        if a == 0 or not bool(b.teacher_available[i]):
            rows.append(a)
            continue
        sign = 1.0 if a > 0 else -1.0
        weight = 2.0 / (1.0 + math.exp(-sign * float(gap.mean()) / tau))
        rows.append(a * ((1 - lam) + lam * weight))
    return broadcast_rows(b, rows)


def loop_stepopsd(b, lam_mix=0.1, alpha=1.0, floor=0.05):
    adv = loop_episode_adv(b)
    credit = [max(-alpha, min(alpha, float(row_gap(b, i)[0].sum()))) for i in range(b.num_rows)]
    budget = defaultdict(list)
    for i in range(b.num_rows):
        if bool(b.teacher_available[i]):
            budget[int(b.traj_id[i])].append(abs(credit[i]))
    rows = []
    for i, a in enumerate(adv):
        if a == 0 or not bool(b.teacher_available[i]):
            rows.append(a)
            continue
        vals = budget[int(b.traj_id[i])]
        hat = credit[i] / (sum(vals) / len(vals) + EPS)
        rows.append(a * max(floor, 1 + lam_mix * (1.0 if a > 0 else -1.0) * hat))
    return broadcast_rows(b, rows)


def loop_agentopsd(b, lam=0.5, band=0.2, eps=1e-6):
    """AgentOPSD the way compute_opsd_turn_advantage writes it: one pass per rollout over its sorted turns."""
    adv = loop_episode_adv(b)
    by_traj, by_group, first = defaultdict(list), defaultdict(list), {}
    for i in range(b.num_rows):
        t = int(b.traj_id[i])
        by_traj[t].append((int(b.step_idx[i]), i))
        if t not in first or int(b.step_idx[i]) < int(b.step_idx[first[t]]):
            first[t] = i
    for t, i in first.items():
        by_group[int(b.group_id[i])].append(float(b.episode_return[i]) - PENALTY * (not bool(b.action_valid[i])))
    rows = [0.0] * b.num_rows
    for t, turns in by_traj.items():
        scores = by_group[int(b.group_id[first[t]])]
        v0 = min(max(sum(scores) / len(scores), 1e-4), 1 - 1e-4)
        logit, previous, increments, order = math.log(v0 / (1 - v0)), v0, [], [i for _, i in sorted(turns)]
        for i in order:
            logit += float(row_gap(b, i)[0].sum())
            belief = min(max(1 / (1 + math.exp(-logit)), eps), 1 - eps)
            increments.append(belief - previous)
            previous = belief
        mean = sum(increments) / len(increments)
        std = math.sqrt(sum((q - mean) ** 2 for q in increments) / len(increments))
        for i, q in zip(order, increments):
            sign = (adv[i] > 0) - (adv[i] < 0)
            m = min(max(1 + band * sign * (q - mean) / (std + eps), 1 - band), 1 + band)
            rows[i] = adv[i] * ((1 - lam) + lam * m)
    return broadcast_rows(b, rows)


def loop_hgpo(b, history=2, gamma=0.95, alpha=1.0):
    """HGPO the way core_hgpo.py writes it: clusters keyed by (k, last k observations), then a weighted mean of each
    row's non-zero items. Means are taken about the cluster's first value, so tied returns give exactly 0."""
    by_traj = defaultdict(list)
    for i in range(b.num_rows):
        by_traj[int(b.traj_id[i])].append((int(b.step_idx[i]), i))
    returns, history_of = [0.0] * b.num_rows, {}
    for turns in by_traj.values():
        order = [i for _, i in sorted(turns)]
        running = 0.0
        for i in reversed(order):
            running = float(b.step_reward[i]) + gamma * running
            returns[i] = running - PENALTY * (not bool(b.action_valid[i]))
        obs = [int(b.obs_hash[i]) for i in order]
        for s, i in enumerate(order):
            history_of[i] = obs[: s + 1]
    clusters = defaultdict(list)
    for i, seen in history_of.items():
        for k in range(1, min(history + 1, len(seen)) + 1):
            clusters[(int(b.group_id[i]), k, tuple(seen[-k:]))].append(i)
    num, den = [0.0] * b.num_rows, [0.0] * b.num_rows
    for (_, k, _), members in clusters.items():
        if len(members) < 2:
            continue
        vals = [returns[i] for i in members]
        mean = vals[0] + sum(v - vals[0] for v in vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
        for i, v in zip(members, vals):
            a = (v - mean) / (std + EPS)
            if a != 0:
                num[i] += (k + 1) ** alpha * a
                den[i] += (k + 1) ** alpha
    return broadcast_rows(b, [n / (d + EPS) for n, d in zip(num, den)])


def loop_distill(b, logp, beta, coef=0.01):
    total, count = 0.0, 0
    for i in range(b.num_rows):
        mask = b.response_mask[i]
        if not bool(b.teacher_available[i]):
            continue
        q, s = b.teacher_logp[i, mask].double(), logp[i, mask].double()
        total += float((torch.sigmoid(beta * (q - s)) * (q - s)).sum())
        count += int(mask.sum())
    return coef * total / max(count, 1)
