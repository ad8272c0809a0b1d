"""Does the policy read its teacher's privileged contexts? P(the right pivot action) for the student and the teacher.

    python -m perf.teacher_probe [--config config/cpu.yaml] [--tasks 120] [--smol] [key=value ...]

On the first ``--tasks`` tasks of the profile's eval panel, the expert's episode is played and, at every pivot
(a turn where some other admissible action loses the episode: a Gates gate), the probability of the right action,
normalised over the admissible actions, is printed for the student (the plain prompt) and for the teacher under
each context (skills; successful sibling = the expert's episode; hindsight = that list and the observation that
followed the row's own action, averaged over every admissible action as the row's own). The policy is the
profile's: its tiny model warm-started as a run would build it (cached under model.cache_dir), or with ``--smol``
SmolLM2-135M-Instruct (config/smol.yaml's model.source, no warm start). ``key=value`` overrides go to the config
(e.g. ``gates.key_at_gates=false gates.horizon=8 gates.pivots=3``). Targets and measured numbers:
docs/teacher-premise.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import torch  # noqa: E402

from envs.base import make_benchmark  # noqa: E402
from harness.config import load_config  # noqa: E402
from harness.policy.context_demos import probe  # noqa: E402
from harness.policy.source import prepare_policy  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "config" / "cpu.yaml"))
    parser.add_argument("--tasks", type=int, default=120, help="eval tasks probed (their pivots are the rows)")
    parser.add_argument("--smol", action="store_true", help="probe SmolLM2-135M-Instruct (no warm start)")
    parser.add_argument("overrides", nargs="*", help="key=value config overrides")
    args = parser.parse_args(argv)
    overrides = list(args.overrides)
    if args.smol:
        smol = load_config(ROOT / "config" / "smol.yaml")
        overrides += [f"model.source={smol.model.source}", "model.dtype=float32", "model.lora_rank=0"]
    cfg = load_config(args.config, overrides)
    benchmark = make_benchmark(cfg.benchmark, cfg.benchmark_config, think=cfg.rollout.think)
    if cfg.train.cpu_threads > 0:  # as a run sets it (config/cpu.yaml: 1 thread; 2 contend on a shared core pair)
        torch.set_num_threads(cfg.train.cpu_threads)
    started = time.perf_counter()
    model, tokenizer, model_dir = prepare_policy(cfg, benchmark, "cpu", log=lambda line: print(line, flush=True))
    model.eval()
    tasks = benchmark.panel(cfg.eval.split).tasks[: args.tasks]
    table = probe(model, tokenizer, benchmark, tasks, cfg.rollout, benchmark.max_steps)
    rows = len(table["student"])
    print(f"\nP(right pivot action), normalised over the admissible actions: {rows} pivots of {len(tasks)} "
          f"{cfg.eval.split} tasks; policy {model_dir}")
    print("| prompt | mean P(right) | share of pivots with P > 0.5 |\n|---|---:|---:|")
    for name, values in table.items():
        label = "student (plain prompt)" if name == "student" else f"teacher, {name}"
        mean = sum(values) / max(len(values), 1)
        print(f"| {label} | {mean:.3f} | {sum(v > 0.5 for v in values) / max(len(values), 1):.3f} |")
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
