"""The GPU check's measurements of the paper model itself (scripts/gpu_check.py runs them before its RL cases):
one random-initialised Qwen2.5-7B-shaped model (harness/model_configs/Qwen2.5-7B-Instruct.json, bf16, gradient
checkpointing as the paper profile sets it), built on the GPU in seconds and never written to disk, then

  throughput    forward + backward of the policy's log-probs (harness.policy.logprobs.response_logprobs, the path
                the update runs) on 8 rows (the paper's ppo_micro_batch) of 2,048 prompt + 512 response tokens;
                tokens/s and model FLOPs utilisation (MFU)
  teacher-pass  the same log-probs without gradient on rows whose prompt also holds the teacher's 4,096-token
                context (the paper's teacher_context_tokens): tokens/s
  decode        transformers' generate at batch 16 and 128 (64-token prompts, 64 sampled tokens each): tokens/s, a
                lower bound on what vLLM's paged, graph-captured decoding reaches

MFU counts the model's FLOPs, not the hardware's: 6·N·T for the layers' matrix products (N their parameters, T
tokens; forward 2, backward 4), 6·V·d per response token for the output projection (only the response's logits
are formed), 6·L·d·S per token for causal attention (S the row length), over the GPU's dense bf16 peak.
Recomputation under gradient checkpointing is work the GPU does but the model does not need, so it lowers MFU.
Peaks (vendor datasheets, dense bf16): H100 SXM and H200 989 TFLOP/s, H100 PCIe 756; another GPU gets no MFU.
Each section also records its GPU memory as a training step's phases do (harness/engine/phase_memory.py:
``memory/<section>_allocated_gib``, ``_reserved_gib``, ``_free_gib``). ``--cpu-dry-run``: the same code at the tiny
shape on the CPU (timings meaningless, no memory figures).
"""
from __future__ import annotations

import json
import time

import torch

from harness.engine.phase_memory import PhaseMemory

DENSE_BF16_PEAK = (("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12))  # first match on the device name
PAPER_ROWS, PAPER_PROMPT, PAPER_RESPONSE, TEACHER_CONTEXT = 8, 2048, 512, 4096
DRY_ROWS, DRY_PROMPT, DRY_RESPONSE, DRY_CONTEXT = 2, 48, 16, 32
DECODE_BATCHES, DECODE_PROMPT, DECODE_NEW = (16, 128), 64, 64


def paper_model(shape: dict, cuda: bool):
    """A random Qwen2 model of ``shape`` on the GPU in bf16 (or on the CPU in float32), checkpointing on."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**shape)  # shape: Qwen2Config's keys only (scripts/gpu_check.py gpu_config)
    config.bos_token_id, config.eos_token_id, config.pad_token_id = None, None, 0
    with torch.device("cuda" if cuda else "cpu"):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if cuda else torch.float32)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    return model


def sections(shape: dict, cuda: bool):
    """([(name, thunk)] per measurement, release): the thunks share one model, built by the first that runs;
    ``release()`` frees it (a 7B model holds 15 GB of the GPU the RL cases need next)."""
    held = {}

    def model():
        if "model" not in held:
            held["model"] = paper_model(shape, cuda)
        return held["model"]

    def release():
        held.clear()
        if cuda:
            torch.cuda.empty_cache()

    def measured(name: str, measure):
        def run():
            built = model()
            memory = PhaseMemory(built.device)  # the section's peaks (allocated, reserved) and free memory after
            memory.start()
            return {**measure(built, cuda), **memory.end(name)}
        return name, run

    return [measured("throughput", throughput), measured("teacher-pass", teacher_pass),
            measured("decode", decode)], release


def throughput(model, cuda: bool) -> dict:
    rows, prompt, response = (PAPER_ROWS, PAPER_PROMPT, PAPER_RESPONSE) if cuda else (DRY_ROWS, DRY_PROMPT,
                                                                                    DRY_RESPONSE)
    model.train()

    def step():
        logp = _logprobs(model, rows, prompt, response)
        logp.sum().backward()
        model.zero_grad(set_to_none=True)

    seconds = _best_time(step, cuda, repeats=2)
    tokens = rows * (prompt + response)
    return {"rows": rows, "row_tokens": prompt + response, "seconds": round(seconds, 4),
            "tok_s": round(tokens / seconds, 1), "mfu": _mfu(model, rows, prompt, response, seconds, cuda),
            "gradient_checkpointing": True}


def teacher_pass(model, cuda: bool) -> dict:
    rows, prompt, response = (PAPER_ROWS, PAPER_PROMPT + TEACHER_CONTEXT, PAPER_RESPONSE) if cuda else (
        DRY_ROWS, DRY_PROMPT + DRY_CONTEXT, DRY_RESPONSE)
    model.eval()

    def forward():
        with torch.no_grad():
            _logprobs(model, rows, prompt, response)

    seconds = _best_time(forward, cuda, repeats=2)
    return {"rows": rows, "row_tokens": prompt + response, "seconds": round(seconds, 4),
            "tok_s": round(rows * (prompt + response) / seconds, 1)}


def decode(model, cuda: bool) -> dict:
    model.eval()
    out = {}
    for batch in DECODE_BATCHES if cuda else (2,):
        prompts = torch.randint(1, model.config.vocab_size, (batch, DECODE_PROMPT), device=model.device)
        new = DECODE_NEW if cuda else 4

        def generate():
            with torch.no_grad():
                model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new,
                               min_new_tokens=new, do_sample=True, top_k=0, top_p=1.0, use_cache=True,
                               pad_token_id=0)

        seconds = _best_time(generate, cuda, repeats=1)
        out[f"batch_{batch}"] = {"new_tokens": new, "seconds": round(seconds, 4),
                                 "tok_s": round(batch * new / seconds, 1)}
    return out


def _logprobs(model, rows: int, prompt: int, response: int):
    from harness.policy.logprobs import response_logprobs

    device, vocab = model.device, model.config.vocab_size
    prompt_ids = torch.randint(1, vocab, (rows, prompt), device=device)
    response_ids = torch.randint(1, vocab, (rows, response), device=device)
    ones = torch.ones_like
    return response_logprobs(model, prompt_ids, ones(prompt_ids, dtype=torch.bool), response_ids,
                             ones(response_ids, dtype=torch.bool), micro_batch=rows)


def _best_time(fn, cuda: bool, repeats: int) -> float:
    fn()  # warm-up: kernels chosen, allocator grown
    best = float("inf")
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def model_flops(model, rows: int, prompt: int, response: int) -> float:
    """Forward + backward FLOPs the model needs for ``rows`` rows (see the module docstring): the layers on every
    token, the output projection only on the response tokens (``logits_to_keep``)."""
    config = model.config
    embedding = model.get_input_embeddings().weight.numel()
    head = config.vocab_size * config.hidden_size
    layers = sum(p.numel() for p in model.parameters()) - embedding - (0 if config.tie_word_embeddings else head)
    tokens = prompt + response
    attention = 6 * config.num_hidden_layers * config.hidden_size * tokens  # per token, causal
    return rows * (tokens * (6 * layers + attention) + response * 6 * head)


def _mfu(model, rows: int, prompt: int, response: int, seconds: float, cuda: bool) -> float | None:
    if not cuda:
        return None
    name = torch.cuda.get_device_name()
    peak = next((flops for key, flops in DENSE_BF16_PEAK if key in name), None)
    return None if peak is None else round(model_flops(model, rows, prompt, response) / seconds / peak, 4)


def shipped_shape() -> dict:
    from harness.memory_plan import SHIPPED_CONFIG

    return json.loads(SHIPPED_CONFIG.read_text())
