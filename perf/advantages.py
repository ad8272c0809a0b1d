"""Vectorised methods vs a straightforward per-row Python loop of the same formula (issue 3 acceptance), and vs the
authors' own functions (issue 35).

    python -m perf.advantages [--rows 4096] [--response-len 512] [--repeats 5] [--threads 1] [--clock wall]

Batch: 4,096 segment rows × 512 response tokens, task groups of 8 rollouts, rollouts of 1–50 segments
(tests/synthetic.py: random_batch). The loops (perf/loops.py) are written the way the reference implementations write
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
import time

import numpy as np  # noqa: E402
import torch

from harness.core import registry
from methods.rlsd import rlsd_lambda
from perf.loops import (
    loop_agentopsd,
    loop_distill,
    loop_gigpo,
    loop_grpo,
    loop_hgpo,
    loop_rlsd,
    loop_sharpo,
    loop_stepopsd,
)
from tests import reference_g2po, reference_graphgpo
from tests.reference_rlsd import compute_rlsd_token_advantage, rlsd_step_as_trained
from tests.synthetic import random_batch


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
def sdar_rlsd(step=10, with_logging=False):
    """The SDAR repo's transform of the GRPO token advantage, every row reweighted (its function has no
    availability mask: our RLSD is compared on a batch where every row has a teacher context). ``with_logging``:
    followed by the SDAR trainer's own logging of the gap (tests/reference_rlsd.py), the same work as our call,
    which returns the gap's moments (and the weight's) with Ã."""
    grpo = registry.build("grpo")
    lam = rlsd_lambda(0.5, 50, step)
    if with_logging:
        return lambda b: rlsd_step_as_trained(grpo.advantages(b)[0], b.old_logp, b.teacher_logp, b.response_mask,
                                              lam, 0.2)[0]
    return lambda b: compute_rlsd_token_advantage(grpo.advantages(b)[0], b.old_logp, b.teacher_logp,
                                                  b.response_mask, lam, 0.2)


def published_cases(batch):
    """(name, batch, ours, published as timed, published for the agreement check)."""
    everyone = batch.with_columns(teacher_available=torch.ones(batch.num_rows, dtype=torch.bool))
    return [
        ("graphgpo", batch, vectorised("graphgpo"), reference_graphgpo.published,
         lambda b: reference_graphgpo.published(b, dtype=np.float64)),
        ("g2po", batch, vectorised("g2po"), reference_g2po.published,
         lambda b: reference_g2po.published(b, dtype=torch.float64)),
        ("rlsd (transform)", everyone, vectorised("rlsd"), sdar_rlsd(), sdar_rlsd()),
        ("rlsd (+ its logging)", everyone, vectorised("rlsd"), sdar_rlsd(with_logging=True), sdar_rlsd()),
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
