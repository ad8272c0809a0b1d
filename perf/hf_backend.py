"""Speed of the hf backend and the log-prob scorer on the tiny profile's model size (CPU).

Builds a tiny Qwen2 model (hidden 128, 2 layers, ~2k vocab) on a synthetic ALFWorld-like corpus, then times
generation (prompts of ~300-600 tokens, up to 32 new tokens) and re-scoring for batches of 16 and 64, and the
gap between backend and recomputed log-probs. Usage: python -m perf.hf_backend [--threads N]
"""
from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import torch

from harness.config_sections import ModelConfig  # noqa: E402
from harness.policy.backends.hf import HFBackend  # noqa: E402
from harness.policy.logprobs import pad_left, pad_right, response_logprobs  # noqa: E402
from harness.policy.models import load_policy  # noqa: E402
from harness.policy.tiny_model import build_tiny_model  # noqa: E402
from tests.tiny_corpus import OBJECTS, VERBS, prompt  # noqa: E402


def pseudo_words(rng: random.Random, n: int) -> str:
    syllables = [c + v for c in "bcdfghklmnprstvw" for v in "aeiou"] + ["ing", "er", "tion", "ly"]
    return " ".join("".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    corpus = [prompt(rng, sentences=rng.randint(20, 45)) for _ in range(300)]
    corpus += [f"<action>{v} {o}</action>" for v in VERBS for o in OBJECTS]
    corpus += [pseudo_words(rng, 40) for _ in range(3000)]  # a benchmark-sized vocabulary (~2k merges)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(ModelConfig(dtype="float32"), corpus, Path(tmp) / "tiny", seed=0)
        model, tokenizer = load_policy(path, "float32", "cpu")
    backend = HFBackend(model, tokenizer)
    print(f"threads={args.threads} params={model.num_parameters()} vocab={len(tokenizer)}")
    for rows, distinct in ((16, 16), (64, 64), (64, 16)):  # (64, 16): 16 tasks x 4 rollouts on their first turn
        prompts = [prompt(rng, sentences=rng.randint(20, 45)) for _ in range(distinct)] * (rows // distinct)
        best = float("inf")
        for repeat in range(args.repeats):
            start = time.perf_counter()
            gens = backend.generate(prompts, temperature=1.0, top_p=1.0, max_new_tokens=32, max_prompt_tokens=2048,
                                    seed=repeat)
            best = min(best, time.perf_counter() - start)
        new_tokens = sum(len(g.response_ids) for g in gens)
        prompt_lens = [len(g.prompt_ids) for g in gens]
        prompt_ids, prompt_mask = pad_left([g.prompt_ids for g in gens], tokenizer.pad_token_id)
        response_ids, response_mask = pad_right([g.response_ids for g in gens], tokenizer.pad_token_id)
        start = time.perf_counter()
        with torch.no_grad():
            scored = response_logprobs(model, prompt_ids, prompt_mask, response_ids, response_mask, micro_batch=16)
        score_s = time.perf_counter() - start
        rollout = torch.zeros_like(scored)
        for i, g in enumerate(gens):
            rollout[i, :len(g.logprobs)] = torch.tensor(g.logprobs)
        print(f"batch {rows} ({distinct} distinct): prompts {min(prompt_lens)}-{max(prompt_lens)} tokens, "
              f"{new_tokens} new tokens | "
              f"generate {best:.3f} s/batch, {new_tokens / best:.0f} new tok/s, "
              f"{(sum(prompt_lens) + new_tokens) / best:.0f} total tok/s | "
              f"rescore {score_s:.3f} s | max |logp gap| {(scored - rollout).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
