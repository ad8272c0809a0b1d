"""Vectorised methods vs a straightforward per-row Python loop of the same formula (issue 3 acceptance), and vs the
authors' own functions (issue 35).

    python -m perf.advantages [--rows 4096] [--response-len 512] [--repeats 5] [--threads 1] [--clock wall]

Batch: 4,096 segment rows × 512 response tokens, task groups of 8 rollouts, rollouts of 1–50 segments
(tests/synthetic.py: random_batch). The loops below are written the way the reference implementations write
them (verl's compute_grpo_outcome_advantage, verl-agent's core_gigpo.py, the SDAR repo's per-row code):
dicts keyed by group id, one pass over the rows, per-row tensor slices for token-level work. Each loop runs
``--loop-repeats`` times over the full batch (2), each vectorised method ``--repeats`` times (7); the best
run of each is kept. Outputs must agree to
1e-6 relative to max(1, |value|) on every token. Target: ≥ 20× for every method.

Second table: GraphGPO, G2PO and RLSD against test-only transcriptions of their authors' functions
(tests/reference_graphgpo.py, tests/reference_g2po.py, tests/reference_rlsd.py), timed as published (float32).
GraphGPO and G2PO must agree to 1e-5 with the same code run in float64 (float32's own rounding differs by ~3e-5;
tests/test_methods_graph.py), RLSD to 1e-6 with the SDAR repo's function given the GRPO advantage; rows of a
one-row task group (NaN in core_g2po.py) are left out. Target: ≥ 2×. RLSD is timed twice: against the function
alone (the issue's target), and against the function followed by the SDAR trainer's own logging of the gap (the
same work as our call, which returns the gap's moments with Ã; the weight's moments are extra on our side).

``--clock cpu`` times the process's CPU time instead of the wall clock: on a shared machine other processes then
add nothing (at one thread the two agree when the machine is idle).

Allocator: glibc hands each fresh 8 MiB tensor back to the kernel on free, so every vectorised op pays page
faults for new memory; that cost swung the same method 2-3× between runs. By default both sides run with
glibc told to keep freed memory (``--malloc caching``), as PyTorch's own CUDA caching allocator does on the
GPU. ``--malloc default`` measures the untouched allocator.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import math
import time
from collections import defaultdict

import numpy as np  # noqa: E402
import torch

from harness.core import registry
from methods.rlsd import rlsd_lambda
from tests import reference_g2po, reference_graphgpo
from tests.reference_rlsd import compute_rlsd_token_advantage, rlsd_step_as_trained
from tests.synthetic import random_batch

PENALTY, EPS = 0.1, 1e-6


# ---------------------------------------------------------------------------------------------- loops
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


# ------------------------------------------------------------------------------------------- harness
def vectorised(name, options=None, step=10, logp=None):
    method = registry.build(name, options or {})
    if logp is None:
        return lambda b: method.advantages(b, step=step)[0]
    return lambda b: method.aux_loss(b, logp, step)[0]


def agree(fast, slow) -> float:
    fast, slow = torch.as_tensor(fast, dtype=torch.float64), torch.as_tensor(slow, dtype=torch.float64)
    return float(((fast - slow).abs() / slow.abs().clamp(min=1.0)).max())


CLOCK = time.perf_counter


def timed(fn, batch, repeats):
    """Best of ``repeats`` runs (timeit's convention: other processes only ever add time)."""
    times, out = [], None
    for _ in range(repeats):
        start = CLOCK()
        out = fn(batch)
        times.append(CLOCK() - start)
    return out, min(times)


# ------------------------------------------------------------------------------ the authors' functions
def sdar_rlsd(step=10):
    """The SDAR repo's transform of the GRPO token advantage, every row reweighted (its function has no
    availability mask: our RLSD is compared on a batch where every row has a teacher context)."""
    grpo = registry.build("grpo")
    lam = rlsd_lambda(0.5, 50, step)
    return lambda b: compute_rlsd_token_advantage(grpo.advantages(b)[0], b.old_logp, b.teacher_logp,
                                                  b.response_mask, lam, 0.2)


def sdar_rlsd_step(step=10):
    """The transform followed by the SDAR trainer's own logging of the gap (tests/reference_rlsd.py): the same
    work as our call, which returns the gap's moments (and the weight's) with Ã."""
    grpo = registry.build("grpo")
    lam = rlsd_lambda(0.5, 50, step)
    return lambda b: rlsd_step_as_trained(grpo.advantages(b)[0], b.old_logp, b.teacher_logp, b.response_mask, lam,
                                          0.2)[0]


def published_cases(batch):
    """(name, batch, ours, published as timed, published for the agreement check)."""
    everyone = batch.with_columns(teacher_available=torch.ones(batch.num_rows, dtype=torch.bool))
    return [
        ("graphgpo", batch, vectorised("graphgpo"), reference_graphgpo.published,
         lambda b: reference_graphgpo.published(b, dtype=np.float64)),
        ("g2po", batch, vectorised("g2po"), reference_g2po.published,
         lambda b: reference_g2po.published(b, dtype=torch.float64)),
        ("rlsd (transform)", everyone, vectorised("rlsd"), sdar_rlsd(), sdar_rlsd()),
        ("rlsd (+ its logging)", everyone, vectorised("rlsd"), sdar_rlsd_step(), sdar_rlsd()),
    ]


def timed_pair(fast_fn, slow_fn, batch, fast_repeats, slow_repeats):
    """Best times of both sides, their runs interleaved (fast, slow, fast, slow, ...): a busy spell of the
    machine then slows both sides instead of one (run back to back, the same code's ratio swung 1.5-2.3×)."""
    fast_times, slow_times, fast = [], [], None
    for i in range(max(fast_repeats, slow_repeats)):
        if i < fast_repeats:
            start = CLOCK()
            fast = fast_fn(batch)
            fast_times.append(CLOCK() - start)
        if i < slow_repeats:
            start = CLOCK()
            slow_fn(batch)
            slow_times.append(CLOCK() - start)
    return fast, min(fast_times), min(slow_times)


def compare_published(batch, args) -> int:
    header = f"{'vectorised ms':>15}{'theirs ms':>12}{'speed-up':>11}{'max rel diff':>15}  ok"
    print(f"\n{'against the authors':<22}{header}")
    failures = 0
    for name, b, fast_fn, theirs_fn, check_fn in published_cases(batch):
        fast_fn(b)  # warm-up
        slow_repeats = args.repeats if name.startswith("rlsd") else args.loop_repeats
        fast, fast_s, slow_s = timed_pair(fast_fn, theirs_fn, b, args.repeats, slow_repeats)
        exact = check_fn(b).double()
        keep = torch.isfinite(exact)  # core_g2po.py: NaN on a one-row task group
        diff, ratio = agree(fast.double()[keep], exact[keep]), slow_s / fast_s
        ok = diff <= (1e-6 if name.startswith("rlsd") else 1e-5) and ratio >= 2
        failures += not ok
        print(f"{name:<22}{fast_s * 1e3:>15.1f}{slow_s * 1e3:>12.1f}{ratio:>10.2f}×{diff:>15.1e}  "
              f"{'yes' if ok else 'NO'}")
    return failures


def keep_freed_memory() -> bool:
    """Tell glibc to serve large tensors from its heap and keep freed pages (a caching allocator)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # mallopt parameter numbers from <malloc.h>
    one_gib = 1 << 30
    return bool(libc.mallopt(m_mmap_threshold, one_gib)) and bool(libc.mallopt(m_trim_threshold, one_gib))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--response-len", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=7, help="runs of each vectorised method (best is kept)")
    parser.add_argument("--loop-repeats", type=int, default=2, help="runs of each loop over the full batch")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both sides (default 1: "
                        "on a shared 2-core machine, OpenMP barriers make small multi-threaded ops erratic)")
    parser.add_argument("--malloc", choices=("caching", "default"), default="caching",
                        help="caching: glibc keeps freed memory (steady state, see the module docstring)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: this process's CPU time (robust on a shared machine)")
    parser.add_argument("--only", choices=("all", "loops", "published"), default="all")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    caching = args.malloc == "caching" and keep_freed_memory()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    batch = random_batch(rows=args.rows, response_len=args.response_len, group_size=8, max_segments=50)
    logp = batch.old_logp + 0.05 * torch.randn(batch.response_mask.shape)
    cases = [
        ("grpo", vectorised("grpo"), loop_grpo),
        ("gigpo", vectorised("gigpo"), loop_gigpo),
        ("rlsd", vectorised("rlsd"), loop_rlsd),
        ("sdar (aux loss)", vectorised("sdar", logp=logp), lambda b: loop_distill(b, logp, 5.0)),
        ("grpo_opsd (aux loss)", vectorised("grpo_opsd", logp=logp), lambda b: loop_distill(b, logp, 0.0)),
        ("stepopsd", vectorised("stepopsd"), loop_stepopsd),
        ("sharpo", vectorised("sharpo"), loop_sharpo),
        ("agentopsd", vectorised("agentopsd"), loop_agentopsd),
        ("hgpo", vectorised("hgpo"), loop_hgpo),
    ]
    n_traj = int(torch.unique(batch.traj_id).numel())
    print(f"batch: {batch.num_rows} rows × {args.response_len} tokens, {n_traj} rollouts in groups of 8, "
          f"torch threads {torch.get_num_threads()}, allocator {'caching' if caching else 'glibc default'}, "
          f"{args.clock} clock")
    failures = 0
    if args.only != "published":
        failures += compare_loops(batch, cases, args)
    if args.only != "loops":
        failures += compare_published(batch, args)
    print("all checks passed" if not failures else f"{failures} method(s) failed")
    return 1 if failures else 0


def compare_loops(batch, cases, args) -> int:
    print(f"{'method':<22}{'vectorised ms':>15}{'loop ms':>12}{'speed-up':>11}{'max rel diff':>15}  ok")
    failures = 0
    for name, fast_fn, loop_fn in cases:
        fast_fn(batch)  # warm-up
        fast, fast_s = timed(fast_fn, batch, args.repeats)
        slow, slow_s = timed(loop_fn, batch, args.loop_repeats)
        diff, ratio = agree(fast, slow), slow_s / fast_s
        ok = diff <= 1e-6 and ratio >= 20
        failures += not ok
        print(f"{name:<22}{fast_s * 1e3:>15.1f}{slow_s * 1e3:>12.0f}{ratio:>10.0f}×{diff:>15.1e}  "
              f"{'yes' if ok else 'NO'}")
    return failures


if __name__ == "__main__":
    raise SystemExit(main())
