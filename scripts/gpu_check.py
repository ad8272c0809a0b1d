"""The GPU check (run it through scripts/gpu_check.sh): 2 RL steps of ``python -m harness train`` on
random-initialised Qwen2-architecture models at real shapes, measured peak GPU memory next to the memory plan's.

Sections, in this order (one H100 or H200; torch, transformers, accelerate and peft, no vLLM, no internet):
  7b-cut4    Qwen2.5-7B's shape cut to 4 layers, full fine-tune: each phase's measured peak (allocated, reserved,
             and the free memory the driver reports; harness/engine/phase_memory.py) beside the memory plan's
             column for the same shape, the plan's rows checked against the run where they are exact
  throughput, teacher-pass, decode
             the full 28-layer 7B shape: forward + backward tokens/s and MFU at the paper's rows, the teacher's
             scoring pass, a decode lower bound at batch 16 and 128 (scripts/gpu_kernels.py)
  1.5b-full  Qwen2.5-1.5B's shape (hidden 1536, 28 layers, 12 heads / 2 KV heads, vocabulary 151,936, tied
             embeddings), full fine-tune
  7b-lora    Qwen2.5-7B-Instruct's shape (harness/model_configs/Qwen2.5-7B-Instruct.json), LoRA rank 64
  1.5b-fsdp1 the 1.5B shape, full fine-tune, train.strategy=fsdp on one rank through torchrun, rows of 2,560
             tokens (64 of prompt + 2,496 of response), one step, micro-batches of 2 rows (at 8 rows the logits of
             2,496 tokens × 151,936 and their gradient alone plan 50.9 GiB: 91.2 GiB in all, more than an H100)

Every case is planned at its GPU shape for both GPUs it may run on (80 GiB H100, 139 GiB H200), also in the CPU
dry run (the plan reads config.json only), and gpu_check.json records both; a case that would not fit fails.
Before any case it checks that the packages it imports are installed (torch, transformers, accelerate, peft,
safetensors, tokenizers, yaml) and names a missing one; it imports no benchmark but Gates.

Models, tokenizers and runs (a 7B folder is 15 GB, its checkpoint more) are written to /dev/shm, else $TMPDIR,
and removed after each case; only gpu_check.json goes to $OUT. Time: an estimate from its parts, not measured.

Everything is built here: a byte-level BPE tokenizer trained on the Gates benchmark's own prompts (as
harness/policy/tiny_model.py builds the tiny one; the models keep their real vocabulary size, so sampled ids beyond the
tokenizer's decode to nothing, and the action is invalid), a model with random weights saved to a local folder,
then ``python -m harness train --config config/cpu.yaml`` with overrides: Gates cut to a hall and a gate, the hf
backend, 8 tasks × 2 rollouts × at most 2 turns, every prompt cut to its last 64 tokens and every response run to
max_response_tokens (a random model hardly ever samples the end of turn), so rows are as long as the plan assumes.

Printed per case: the plan's peak without its reserve row (what ``torch.cuda.max_memory_allocated`` can see) and
the run's logged ``memory/peak_gib``, and tokens/s of generation (response tokens / time/generation_s) and of the
update (prompt + response tokens / time/update_s). ``--cpu-dry-run``: the same path on the CPU with tiny shapes
(the test of the default run), where there is no GPU memory to measure.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")

QWEN_1_5B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rope_theta=1e6,
                 rms_norm_eps=1e-6, max_position_embeddings=32768)
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=1024, tie_word_embeddings=False, max_position_embeddings=2048)
CASES = {  # name: (shape on a GPU, shape on the CPU dry run, overrides, torchrun ranks or 0), most telling first:
    # a timeout cuts the last (1.5b-full: the 1.5B plan without FSDP, which paper_1p5b does not use)
    "7b-cut4": ("shipped:4", TINY, ["model.lora_rank=0"], 0),
    # train.strategy=fsdp on one rank through torchrun (the paper profile's code path: sharding from rank 0's
    # weights, FSDP units, reduce-scatter) with rows of 2,560 tokens, the paper's 2,048 + 512: Gates prompts are
    # ~100 tokens, so the rows' length comes from the responses (a random model runs them to the limit)
    "1.5b-fsdp1": (QWEN_1_5B, TINY, ["model.lora_rank=0", "train.strategy=fsdp", "grid.gpus=1", "train.steps=1",
                                     "rollout.tasks_per_step=4", "train.ppo_micro_batch=2", "train.ppo_mini_batch=8",
                                     "rollout.max_prompt_tokens=64"], 1),
    "7b-lora": ("shipped", TINY, ["model.lora_rank=64", "model.lora_alpha=64"], 0),
    "1.5b-full": (QWEN_1_5B, TINY, ["model.lora_rank=0"], 0),
}
FSDP_ROW_TOKENS = 2560  # the paper's max_prompt_tokens + max_response_tokens
TARGET_GPUS_GIB = (80.0, 139.0)  # an H100 80GB, an H200: every case must fit both
NEEDED = ("torch", "transformers", "accelerate", "peft", "safetensors", "tokenizers", "yaml")
TOKENIZER_VOCAB = 300  # bytes + a few merges: Gates prompts come out at ~95-110 tokens, all cut to 64


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-dry-run", action="store_true",
                        help="tiny shapes on the CPU (the test of the default run)")
    parser.add_argument("--out", default=os.environ.get("OUT") or "results/gpu_check",
                        help="folder for gpu_check.json (default: $OUT, else results/gpu_check); models and runs go to "
                             "/dev/shm, else $TMPDIR, and are removed after each case")
    parser.add_argument("--only", choices=sorted([*CASES, *KERNEL_SECTIONS]), action="append",
                        help="run this section only (repeatable)")
    parser.add_argument("--response-tokens", type=int, default=None, help="max_response_tokens (GPU 256, CPU 8)")
    args = parser.parse_args(argv)
    missing = missing_packages()
    if missing:
        print(f"gpu_check: the packages {missing} are not installed; `pip install -e .` (or torch, transformers, "
              "accelerate, peft) before the check", file=sys.stderr)
        return 2
    import torch

    cuda = torch.cuda.is_available() and not args.cpu_dry_run
    if not cuda and not args.cpu_dry_run:
        print("gpu_check: torch sees no CUDA GPU; pass --cpu-dry-run to run the same path on the CPU", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    scratch_dir = scratch()
    work = scratch_dir / "work"  # models and runs: deleted after each case (a 7B folder is 15 GB); never in $OUT
    results, failed = [], []
    out.mkdir(parents=True, exist_ok=True)
    response_tokens = args.response_tokens or (256 if cuda else 8)
    for name, measure in planned_sections(args.only, cuda, work, response_tokens):
        started = time.perf_counter()
        try:  # one section failing (out of memory, say) still leaves the others' numbers
            result = measure()
        except (Exception, SystemExit) as err:
            print(f"gpu_check: case {name} failed: {err}", file=sys.stderr, flush=True)
            failed.append({"case": name, "error": str(err)})
        else:
            result = {"case": name, "device": "cuda" if cuda else "cpu", **result,
                      "case_s": round(time.perf_counter() - started, 1)}
            results.append(result)
            print(summary_line(result), flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        # written after each section, so the script's timeout keeps what finished
        (out / "gpu_check.json").write_text(json.dumps(results + failed, indent=2))
    shutil.rmtree(scratch_dir, ignore_errors=True)
    print_table([r for r in results if "plan_peak_gib" in r])
    print(f"results: {out / 'gpu_check.json'}" + (f"; FAILED: {[f['case'] for f in failed]}" if failed else ""))
    return 1 if failed else 0


KERNEL_SECTIONS = ("throughput", "teacher-pass", "decode")  # scripts/gpu_kernels.py, after the first case


def planned_sections(only: list[str] | None, cuda: bool, work: Path, response_tokens: int):
    """(name, thunk) in the order they run: the phase-memory case, the 7B kernels, the other RL cases."""
    from scripts import gpu_kernels

    kernels, release = gpu_kernels.sections(gpu_config("shipped") if cuda else TINY, cuda)

    def rl_case(name: str):
        def run():
            release()  # the kernels' 7B model leaves the GPU before a case's run starts (a no-op otherwise)
            return run_case(name, cuda, work, response_tokens)
        return run

    first, *rest = CASES
    ordered = [(first, rl_case(first)), *kernels, *((name, rl_case(name)) for name in rest)]
    return [(name, measure) for name, measure in ordered if not only or name in only]


def print_table(cases: list[dict]) -> None:
    print(f"\n{'case':<10} {'plan GiB':>9} {'measured GiB':>13} {'gen tok/s':>10} {'update tok/s':>13}")
    for r in cases:
        measured = f"{r['measured_peak_gib']:.2f}" if r["measured_peak_gib"] is not None else "n/a (CPU)"
        print(f"{r['case']:<10} {r['plan_peak_gib']:>9.2f} {measured:>13} {r['generation_tok_s']:>10.1f} "
              f"{r['update_tok_s']:>13.1f}")


def missing_packages() -> list[str]:
    """What the check imports and this machine lacks (found without importing: a fast, named failure)."""
    from harness.preflight import importable

    return [name for name in NEEDED if not importable(name)]


def scratch() -> Path:
    """Where the large files go: memory-backed /dev/shm where it is writable, else $TMPDIR (a folder of its own)."""
    import tempfile

    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="gpu_check-", dir=str(shm) if shm.is_dir() and os.access(shm, os.W_OK)
                                 else None))


def run_case(name: str, cuda: bool, work: Path, response_tokens: int) -> dict:
    from harness import memory_plan, memory_rows
    from harness.config import load_config

    gpu_shape, cpu_shape, extra, ranks = CASES[name]
    gpu_plans = target_plans(name, work / f"plan-{name}")
    if not all(fits for _, fits in gpu_plans.values()):
        raise SystemExit(f"gpu_check: case {name}: its plan at the GPU shape does not fit {gpu_plans} (GiB, fits)")
    if ranks:  # the rows are as long as the paper's: the response takes what the prompt does not
        response_tokens = (FSDP_ROW_TOKENS if cuda else 80) - 64  # the CPU dry run: 16 tokens
    model_dir = build_model(gpu_shape if cuda else cpu_shape, work / f"model-{name}", cuda)
    overrides = run_overrides(model_dir, work / "runs", cuda, response_tokens) + extra
    cfg = load_config(REPO / "config" / "cpu.yaml", overrides)
    gpu_gib = memory_plan.device_gib() if cuda else 139.0  # the dry run plans for the H200 it stands in for
    plan = memory_plan.make_plan(cfg, gpu_gib)
    print(f"\n=== {name}\n{plan.table()}\n{plan.peak_line()}", flush=True)
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)]
                if ranks else [sys.executable])
    command = [*launcher, "-m", "harness", "train", "--config", str(REPO / "config" / "cpu.yaml"), "--force",
               *overrides]
    done = subprocess.run(command, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"}, text=True,
                          capture_output=True)
    sys.stdout.write(done.stdout[-3000:])
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-6000:])
        raise SystemExit(f"gpu_check: case {name}: `python -m harness train` exited {done.returncode}")
    rows = [json.loads(line) for line in (cfg.run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    if not (cfg.run_dir / "done.json").exists() or len(rows) != cfg.train.steps:
        raise SystemExit(f"gpu_check: case {name}: the run did not finish its {cfg.train.steps} steps ({cfg.run_dir})")
    measured = [r["memory/peak_gib"] for r in rows if "memory/peak_gib" in r]
    if cuda and not measured:
        raise SystemExit(f"gpu_check: case {name}: the run logged no memory/peak_gib on CUDA")
    return {
        "params": plan_params(plan), "gpu_gib": round(gpu_gib, 2),
        "plan_peak_gib": round(plan.peak_gib(reserve=False), 2), "plan_peak_phase": memory_rows.PHASES[plan.peak_phase],
        "plan_peak_with_reserve_gib": round(plan.peak_gib(), 2),
        "measured_peak_gib": round(max(measured), 2) if measured else None,
        "generation_tok_s": sum(r["train/response_tokens"] for r in rows) / sum(r["time/generation_s"] for r in rows),
        "update_tok_s": sum(r["train/tokens"] for r in rows) / sum(r["time/update_s"] for r in rows),
        "rows_per_step": [r["train/rows"] for r in rows], "strategy": cfg.train.strategy,
        "row_tokens_limit": cfg.rollout.max_prompt_tokens + cfg.rollout.max_response_tokens,
        "gpu_shape_plan_gib": {f"{gib:g}": peak for gib, (peak, _) in gpu_plans.items()},
        "phases": phase_memory(plan, rows),
    }


PLAN_COLUMNS = {"generation": ("gen",), "scoring": ("score",), "update": ("bwd", "step")}  # logged → planned


def phase_memory(plan, rows: list[dict]) -> dict:
    """Per phase of the step: the plan's column without the reserve (the largest, where backward and the optimizer
    step are measured together) beside the run's peaks over its steps (None on the CPU)."""
    out = {}
    for phase, columns in PLAN_COLUMNS.items():
        measured = {kind: [r[f"memory/{phase}_{kind}_gib"] for r in rows if f"memory/{phase}_{kind}_gib" in r]
                    for kind in ("allocated", "reserved", "free")}
        out[phase] = {"plan_gib": round(max(plan.phase_bytes(c, reserve=False) for c in columns) / 2**30, 2),
                      "allocated_gib": round(max(measured["allocated"]), 2) if measured["allocated"] else None,
                      "reserved_gib": round(max(measured["reserved"]), 2) if measured["reserved"] else None,
                      "min_free_gib": round(min(measured["free"]), 2) if measured["free"] else None}
    return out


def target_plans(name: str, folder: Path) -> dict[float, tuple[float, bool]]:
    """The case's memory plan at its GPU shape (config.json only, no weights) for each target GPU: peak with the
    reserve, and whether it fits."""
    from harness import memory_plan
    from harness.config import load_config

    gpu_shape, _, extra, ranks = CASES[name]
    folder.mkdir(parents=True, exist_ok=True)
    shape = {**gpu_config(gpu_shape), "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}
    (folder / "config.json").write_text(json.dumps(shape))
    response_tokens = FSDP_ROW_TOKENS - 64 if ranks else 256
    cfg = load_config(REPO / "config" / "cpu.yaml", run_overrides(folder, folder / "runs", True, response_tokens)
                      + extra)
    plans = {gib: memory_plan.make_plan(cfg, gib) for gib in TARGET_GPUS_GIB}
    return {gib: (round(plan.peak_gib(), 2), plan.fits) for gib, plan in plans.items()}


def plan_params(plan) -> str:
    return plan.title.splitlines()[0].split(", ")[1]


def summary_line(r: dict) -> str:
    if "plan_peak_gib" not in r:  # a kernel section
        numbers = {k: v for k, v in r.items() if k not in ("case", "device", "case_s")}
        return f"{r['case']}: {json.dumps(numbers)}; {r['case_s']} s"
    measured = f"{r['measured_peak_gib']:.2f} GiB" if r["measured_peak_gib"] is not None else "n/a on the CPU"
    return (f"{r['case']}: plan {r['plan_peak_gib']:.2f} GiB ({r['plan_peak_phase']}; without the reserve), measured "
            f"{measured}; generation {r['generation_tok_s']:.1f} tok/s, update {r['update_tok_s']:.1f} tok/s; "
            f"phases {json.dumps(r['phases'])}; {r['case_s']} s")


def run_overrides(model_dir: Path, runs: Path, cuda: bool, response_tokens: int) -> list[str]:
    return [
        f"model.source={model_dir}", f"model.dtype={'bfloat16' if cuda else 'float32'}",
        "model.gradient_checkpointing=true", "backend.name=hf",
        f"train.device={'cuda' if cuda else 'cpu'}", f"train.cpu_threads={0 if cuda else 1}",
        "rollout.tasks_per_step=8", "rollout.group_size=2", "rollout.generation_batch=16",
        "gates.horizon=1", "gates.pivots=1", "gates.slack=0",  # 2 steps an episode at most: a hall, a gate
        "gates.train_panel_size=16", "gates.eval_panel_size=4",  # the few tasks that small a layout space has
        "rollout.max_prompt_tokens=64", f"rollout.max_response_tokens={response_tokens}",
        "train.steps=2", "train.ppo_mini_batch=16", "train.ppo_micro_batch=16", "train.checkpoint_every=2",
        "train.lr=1e-6", "eval.every=0", "eval.at_start=false", "eval.panel_size=2",
        "tracking.enabled=false", f"output_dir={runs}", "run_label=gpu_check",
    ]


def build_model(shape, folder: Path, cuda: bool) -> Path:
    """A random-initialised Qwen2 model of ``shape`` (or the shipped 7B config) and a locally trained tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config
    from transformers.utils import logging as hf_logging

    from harness.policy.tokenizer import build_tokenizer, end_of_turn_id

    tokenizer = build_tokenizer(gates_corpus(), TOKENIZER_VOCAB, folder)
    shape = {**gpu_config(shape), "bos_token_id": None, "eos_token_id": end_of_turn_id(tokenizer),
             "pad_token_id": tokenizer.pad_token_id}
    config = Qwen2Config(**shape)
    dtype = torch.bfloat16 if cuda else torch.float32
    with torch.device("cuda" if cuda else "cpu"):  # initialising 7.6B weights on the GPU takes seconds, not minutes
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    hf_logging.disable_progress_bar()
    model.save_pretrained(folder)
    del model
    if cuda:
        torch.cuda.empty_cache()
    return folder


def gpu_config(spec) -> dict:
    """A case's model shape: a dict as given, or ``shipped`` (the shipped Qwen2.5-7B-Instruct config.json), or
    ``shipped:<layers>`` (that config cut to so many layers), without the keys a Qwen2Config does not take."""
    if isinstance(spec, dict):
        return dict(spec)
    from scripts.gpu_kernels import shipped_shape

    shape = {k: v for k, v in shipped_shape().items()
             if k not in ("model_type", "architectures", "transformers_version", "torch_dtype")}
    _, _, layers = spec.partition(":")
    return {**shape, "num_hidden_layers": int(layers)} if layers else shape


def gates_corpus() -> list[str]:
    """Prompts and expert responses of 50 Gates train tasks: what the tokenizer is trained on."""
    from harness.config import load_config, seeded_benchmark
    from harness.policy.source import demonstrations

    cfg = load_config(REPO / "config" / "cpu.yaml")
    benchmark = seeded_benchmark(cfg)
    demos = demonstrations(benchmark, benchmark.panel("train").tasks[:50], cfg.rollout, benchmark.max_steps)
    return [p for p, _ in demos] + [r for _, r in demos]


if __name__ == "__main__":
    sys.exit(main())
