"""A recording stand-in for the ``vllm`` package, put on PYTHONPATH by tests/test_fsdp_vllm.py so that a torchrun
launch of ``harness train`` builds one "engine" per rank. Every call is appended, as one JSON line, to
``$STAND_IN_VLLM_LOG/rank<RANK>.jsonl``; nothing is generated but three tokens and the end of turn."""
from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from types import SimpleNamespace

import torch

__version__ = "0.32.0"


def record(event: str, **fields) -> None:
    path = Path(os.environ["STAND_IN_VLLM_LOG"]) / f"rank{os.environ.get('RANK', '0')}.jsonl"
    with path.open("a") as log:
        log.write(json.dumps({"event": event, **fields}) + "\n")


_empty_cache = torch.cuda.empty_cache
torch.cuda.empty_cache = lambda: (record("empty_cache"), _empty_cache())[1]


class LLM:
    def __init__(self, **kwargs):
        group = torch.distributed.is_initialized()
        record("LLM", kwargs={k: v for k, v in kwargs.items() if isinstance(v, (int, float, str, bool, type(None)))},
               environ={k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE",
                                                       "VLLM_ENABLE_V1_MULTIPROCESSING")},
               group_world_size=torch.distributed.get_world_size() if group else None)

    def generate(self, prompts, params, use_tqdm=False, lora_request=None):
        adapter = None
        if lora_request is not None:  # what vLLM would load: the peft folder's tensors
            from safetensors.torch import load_file

            tensors = load_file(str(Path(lora_request.lora_path) / "adapter_model.safetensors"))
            adapter = {"id": lora_request.lora_int_id, "shapes": {k: list(t.shape) for k, t in tensors.items()},
                       "sums": {k: float(t.double().sum()) for k, t in tensors.items()}}
        record("generate", rows=len(prompts), adapter=adapter)
        ids = [10, 11, 12, params[0].stop_token_ids[0]]
        completion = SimpleNamespace(token_ids=ids, logprobs=[{t: SimpleNamespace(logprob=-1.0)} for t in ids],
                                     finish_reason="stop")
        return [SimpleNamespace(outputs=[completion]) for _ in prompts]

    def sleep(self, level=1):
        record("sleep", level=level)

    def wake_up(self, tags=None):
        record("wake_up", tags=tags)

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        weights = kwargs["weights_iterator"]
        record(method, streamed=inspect.isgenerator(weights))
        for name, tensor in weights:
            record("load", name=name, shape=list(tensor.shape), dtype=str(tensor.dtype),
                   sum=float(tensor.double().sum()))
        return [None]

    def reset_prefix_cache(self):
        record("reset_prefix_cache")


class SamplingParams(SimpleNamespace):
    pass
