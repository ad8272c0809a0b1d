"""The tiny offline model: tokenizer, cached build, loading, warm start, errors."""
from __future__ import annotations

import json
import random

import pytest
import torch
from tiny_corpus import build_and_load, corpus, one_torch_thread, prompt, response, tiny_config  # noqa: F401
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from harness.policy.models import load_policy
from harness.policy.tiny_model import build_tiny_model
from harness.policy.tokenizer import (
    ModelNotFoundError,
    build_tokenizer,
    chat_prompt_ids,
    end_of_turn_id,
    load_tokenizer,
)
from harness.policy.warm_start import warm_start


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return build_and_load(tmp_path_factory.mktemp("models") / "tiny")


def test_tokenizer_round_trips_benchmark_text_and_unseen_text(tmp_path):
    tokenizer = build_tokenizer(corpus(), 400, tmp_path)
    rng = random.Random(7)
    texts = [prompt(rng), response(rng), "search[3 ounce bright citrus deodorant]  é ü — 価格 < $40.00\n\ttab"]
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
    # the corpus taught it merges: benchmark text takes far fewer tokens than bytes
    assert len(tokenizer(texts[0])["input_ids"]) < len(texts[0].encode()) / 2
    assert len(tokenizer) <= 400


def test_special_tokens_are_atomic_and_chat_template_ends_with_generation_prompt(policy):
    _, tokenizer = policy
    (ids,) = chat_prompt_ids(tokenizer, ["go to fridge 1"])
    vocab = tokenizer.get_vocab()
    assert ids[0] == vocab["<|im_start|>"] and vocab["<|im_end|>"] in ids
    assert tokenizer.decode(ids) == "<|im_start|>user\ngo to fridge 1<|im_end|>\n<|im_start|>assistant\n"
    assert end_of_turn_id(tokenizer) == tokenizer.eos_token_id == vocab["<|im_end|>"]


def test_tiny_model_build_is_cached_and_keyed_on_corpus_shape_and_seed(tmp_path):
    folder = tmp_path / "tiny"
    build_tiny_model(tiny_config(), corpus(), folder, seed=0)
    weights = folder / "model.safetensors"
    first = weights.stat().st_mtime_ns
    assert build_tiny_model(tiny_config(), iter(corpus()), folder, seed=0) == folder
    assert weights.stat().st_mtime_ns == first  # reused, not rewritten
    build_tiny_model(tiny_config(), corpus(n=50), folder, seed=0)
    assert weights.stat().st_mtime_ns != first  # another corpus -> rebuilt
    info = json.loads((folder / "build_info.json").read_text())
    assert info["corpus_texts"] == 100 and not list(tmp_path.glob(".tiny.tmp-*"))
    model, tokenizer = load_policy(folder, "float32", "cpu")
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.config.vocab_size == len(tokenizer)


def test_same_seed_gives_the_same_weights(tmp_path):
    a, _ = build_and_load(tmp_path / "a", seed=3)
    b, _ = build_and_load(tmp_path / "b", seed=3)
    c, _ = build_and_load(tmp_path / "c", seed=4)
    wa, wb, wc = (m.model.layers[0].mlp.up_proj.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_build_refuses_to_overwrite_a_foreign_folder(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        build_tiny_model(tiny_config(), corpus(), tmp_path, seed=0)


def test_load_policy_gives_a_fast_left_padding_tokenizer_that_matches_tokenizer_json(policy, tmp_path):
    model, tokenizer = policy
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == "<|endoftext|>"
    text = prompt(random.Random(1))
    raw = Tokenizer.from_file(str(model.name_or_path + "/tokenizer.json"))
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == raw.encode(text, add_special_tokens=False).ids
    batch = tokenizer(["a", "go to fridge 1"], padding=True)
    assert batch["attention_mask"][0][0] == 0 and batch["attention_mask"][0][-1] == 1  # padded on the left


def test_load_tokenizer_reads_checkpoint_style_configs(policy, tmp_path):
    """Real checkpoints store special tokens as AddedToken dicts and may keep the template in chat_template.jinja."""
    _, tokenizer = policy
    tokenizer.save_pretrained(tmp_path)
    settings = json.loads((tmp_path / "tokenizer_config.json").read_text())
    template = settings.pop("chat_template", None) or (tmp_path / "chat_template.jinja").read_text()
    settings["eos_token"] = {"content": "<|im_end|>", "special": True}
    settings["pad_token"] = None
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(settings))
    (tmp_path / "chat_template.jinja").write_text(template)
    tokenizer_json = json.loads((tmp_path / "tokenizer.json").read_text())
    tokenizer_json["padding"] = None  # padding once used leaves its pad token in tokenizer.json
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer_json))
    loaded = load_tokenizer(tmp_path)
    assert loaded.eos_token == "<|im_end|>" and loaded.pad_token == "<|im_end|>"  # no pad token -> eos
    assert chat_prompt_ids(loaded, ["x"]) == chat_prompt_ids(tokenizer, ["x"])


def test_missing_model_folder_says_how_to_build_or_where_to_put_it(tmp_path):
    with pytest.raises(ModelNotFoundError, match="build-model") as err:
        load_policy(tmp_path / "nowhere", "float32", "cpu")
    assert "model.source" in str(err.value)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelNotFoundError, match="tokenizer.json"):
        load_policy(tmp_path, "float32", "cpu")


def test_warm_start_lowers_the_sft_loss_on_response_tokens_only(tmp_path):
    model, tokenizer = build_and_load(tmp_path / "tiny")
    rng = random.Random(0)
    demos = [(prompt(rng, sentences=3), response(rng)) for _ in range(12)]
    logged = []
    stats = warm_start(model, tokenizer, demos, epochs=6, lr=1e-2, seed=0, batch_size=4, log=logged.append)
    assert len(stats["loss_per_epoch"]) == 6 == len(logged)
    assert stats["last_loss"] < 0.5 * stats["first_loss"]
    # response tokens + one end-of-turn token per demo
    expected = sum(len(tokenizer(r, add_special_tokens=False)["input_ids"]) + 1 for _, r in demos)
    assert stats["response_tokens"] == expected
    assert not model.training and all(p.grad is None for p in model.parameters())
