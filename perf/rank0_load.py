"""Host memory of an FSDP start-up: rank 0 alone loads the weights, the other ranks build on the meta device and
receive their own rows by a scatter (harness/engine/distributed.py: shard). Prints each rank's peak RSS.

    python -m perf.rank0_load [--hidden 1024 --layers 12] [--check]

Builds a random Qwen2-architecture model (hidden h, 16 h^2 parameters a layer: 1024 x 12 layers = ~200M) in a
temporary folder in a separate process, then launches 2 gloo ranks with torchrun; each rank loads its model as a
run does (``load_policy`` on "cpu" for rank 0, on "meta" for rank 1), shards it, and reports its peak RSS
(``ru_maxrss``, the whole process: imports included, the same on both ranks) and how far its shards are from the
folder's weights. With 2 ranks rank 0 holds the full model plus its half shard and rank 1 its half shard plus one
received chunk, so rank 0's peak is above rank 1's by at least the fp32 model. ``--check`` exits 1 unless it is, and
the shards equal the folder's weights exactly.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = [f"take {o} from {p}" for o in ("mug", "apple", "key", "book") for p in ("desk", "shelf", "drawer")]


def build(folder: Path, hidden: int, layers: int) -> int:
    """The model folder; returns its parameter count."""
    from harness.config_sections import ModelConfig
    from harness.policy.tiny_model import build_tiny_model

    cfg = ModelConfig(tiny_hidden=hidden, tiny_layers=layers, tiny_heads=max(2, hidden // 128), tiny_vocab=300)
    build_tiny_model(cfg, CORPUS, folder, seed=0)
    return json.loads((folder / "build_info.json").read_text())["parameters"]


def rank_main(folder: Path, out: Path) -> None:
    import torch
    import torch.distributed as dist

    from harness.engine import sharding
    from harness.policy.models import load_policy

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    start_mib = current_rss_mib()
    model, _ = load_policy(folder, "float32", "meta" if rank else "cpu")
    on_meta = all(p.device.type == "meta" for p in model.parameters())
    sharded = sharding.shard(model, torch.device("cpu"), torch.bfloat16)
    del model
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    local, total = sharding.local_parameter_count(sharded)
    diff = None
    full = {name: t.full_tensor() for name, t in sharded.state_dict().items()}  # a collective: every rank
    if rank == 0:
        from safetensors.torch import load_file

        saved = load_file(folder / "model.safetensors")
        diff = max(float((full[name] - tensor).abs().max()) for name, tensor in saved.items())
    del full
    report = {"rank": rank, "built_on_meta": on_meta, "peak_rss_mib": peak_mib, "start_rss_mib": start_mib,
              "local_parameters": local,
              "parameters": total, "max_abs_diff_to_folder": diff}
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


def current_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(hidden: int, layers: int) -> dict:
    """Build the model, run the 2 ranks, return their reports (and the model's size)."""
    with tempfile.TemporaryDirectory(prefix="rank0-load-") as tmp:
        folder, out = Path(tmp) / "model", Path(tmp) / "out"
        out.mkdir()
        code = ("import sys; from perf.rank0_load import build; "
                "print(build(__import__('pathlib').Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))")
        built = subprocess.run([sys.executable, "-c", code, str(folder), str(hidden), str(layers)],
                               capture_output=True, text=True, check=True, cwd=ROOT)
        parameters = int(built.stdout.strip().splitlines()[-1])
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        __file__, "--rank-main", str(folder), str(out)], check=True, env=env, capture_output=True)
        ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    fp32_mib = parameters * 4 / 2**20
    growth = [r["peak_rss_mib"] - r["start_rss_mib"] for r in ranks]
    gap = ranks[0]["peak_rss_mib"] - ranks[1]["peak_rss_mib"]
    return {"parameters": parameters, "fp32_mib": fp32_mib, "gap_mib": gap,
            "growth_mib": growth, "ranks": ranks,
            # rank 1 never held a full copy: its growth is its half shard plus one chunk, rank 0's the model more
            "ok": (gap >= fp32_mib and ranks[1]["built_on_meta"]
                   and not ranks[0]["built_on_meta"] and ranks[0]["max_abs_diff_to_folder"] == 0.0)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--check", action="store_true", help="exit 1 unless rank 1 never held a full copy")
    args = parser.parse_args()
    result = measure(args.hidden, args.layers)
    ranks, fp32_mib, gap = result["ranks"], result["fp32_mib"], result["gap_mib"]
    print(f"model: {result['parameters'] / 1e6:.1f}M parameters, {fp32_mib:.0f} MiB in fp32")
    for r, growth in zip(ranks, result["growth_mib"]):
        print(f"rank {r['rank']}: built on meta {r['built_on_meta']}, RSS {r['start_rss_mib']:.0f} MiB before the "
              f"load, peak {r['peak_rss_mib']:.0f} MiB (+{growth:.0f} MiB, {growth / fp32_mib:.2f} x the fp32 model), "
              f"holds {r['local_parameters'] / r['parameters']:.2f} of the parameters")
    print(f"rank 0 - rank 1 peak RSS: {gap:.0f} MiB ({gap / fp32_mib:.2f} x the fp32 model); "
          f"shards vs folder: max |diff| {ranks[0]['max_abs_diff_to_folder']}")
    print(json.dumps(result))
    return 0 if result["ok"] or not args.check else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--rank-main":
        rank_main(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit(main())
