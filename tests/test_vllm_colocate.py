"""The vllm backend colocated with the trainer, driven by the real training loop on a recording stand-in for
``vllm.LLM`` (no vLLM needed): the engine sleeps for the update, wakes its weights for the sync and its KV cache
for the next generation, is sized from the rollout limits, and refuses a vLLM outside the supported range."""
from __future__ import annotations

import itertools
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from harness.policy.backends import engine_config
from harness.policy.backends.vllm import SUPPORTED_TEXT, check_vllm_version
from tests.engine_helpers import toy_config


class RecordingLLM:
    """Answers every request with three tokens and the end of turn, and records each call the backend makes."""

    calls: list[str] = []
    instances: list["RecordingLLM"] = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.environ = {name: os.environ.get(name) for name in ENVIRON}  # what the engine would read
        self.synced: dict[str, torch.Tensor] = {}
        self.lora_requests: list = []
        RecordingLLM.calls.append("LLM")
        RecordingLLM.instances.append(self)

    probe_answer = None  # ids -> the prompt log-probs a probe request gets (a test sets it)

    def generate(self, prompts, params, use_tqdm=False, lora_request=None):
        if not isinstance(params, list):  # one SamplingParams: the level-2 probe's prompt log-probs
            self.calls.append("probe")
            return [SimpleNamespace(prompt_logprobs=RecordingLLM.probe_answer(prompts[0]["prompt_token_ids"]))]
        self.calls.append("generate")
        self.lora_requests.append(lora_request)
        ids = [10, 11, 12, params[0].stop_token_ids[0]]
        completion = SimpleNamespace(token_ids=ids, logprobs=[{t: SimpleNamespace(logprob=-1.0)} for t in ids],
                                     finish_reason="stop")
        return [SimpleNamespace(outputs=[completion]) for _ in prompts]

    def sleep(self, level=1):
        self.calls.append(f"sleep(level={level})")

    def wake_up(self, tags=None):
        self.calls.append(f"wake_up({tags})")

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        self.calls.append(method)
        assert kwargs["is_checkpoint_format"] is True
        self.synced = {}
        for name, tensor in kwargs["weights_iterator"]:  # consumed as vLLM's load_weights does: one at a time
            self.calls.append("load")
            self.synced[name] = tensor.clone()
        return [None]

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix_cache")


ENVIRON = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "VLLM_ENABLE_V1_MULTIPROCESSING")


@pytest.fixture
def fake_vllm(monkeypatch):
    """``vllm`` 0.32.0 on a GPU platform, as far as the backend can tell; emptying PyTorch's cache, gathering a
    full tensor and choosing a GPU are recorded in the same call log."""
    import harness.policy.engine_weights as engine_weights

    RecordingLLM.calls, RecordingLLM.instances, RecordingLLM.probe_answer = [], [], None
    gather = engine_weights.full
    monkeypatch.setattr(engine_weights, "full", lambda t: (RecordingLLM.calls.append("gather"), gather(t))[1])
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: RecordingLLM.calls.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: RecordingLLM.calls.append(f"set_device({device})"))
    lora = types.ModuleType("vllm.lora")
    lora_request = types.ModuleType("vllm.lora.request")
    lora_request.LoRARequest = lambda name, int_id, path: SimpleNamespace(lora_name=name, lora_int_id=int_id,
                                                                          lora_path=path)
    monkeypatch.setitem(sys.modules, "vllm.lora", lora)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", lora_request)
    module = types.ModuleType("vllm")
    module.__version__ = "0.32.0"
    module.LLM = RecordingLLM
    module.SamplingParams = lambda **kwargs: SimpleNamespace(**kwargs)
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(is_cpu=lambda: False, is_sleep_mode_available=lambda: True)
    module.platforms = platforms
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    return module


def collapse(calls: list[str]) -> list[str]:
    """One entry per run of equal calls (a rollout generates once per turn), without the per-tensor entries."""
    return [name for name, _ in itertools.groupby(c for c in calls if c not in ("gather", "load"))]


def test_each_step_sleeps_for_the_update_and_wakes_weights_then_kv_cache(tmp_path, monkeypatch, fake_vllm):
    import harness.engine.trainer

    cfg = toy_config(tmp_path, backend={"name": "vllm", "sleep_level": 1}, train={"steps": 2, "checkpoint_every": 10},
                     eval={"every": 10, "at_start": False})
    real_update = harness.engine.trainer.ppo_update

    def recorded_update(model, *args, **kwargs):
        RecordingLLM.calls.append("update")
        metrics = real_update(model, *args, **kwargs)
        recorded_update.weights = {k: v.clone() for k, v in model.state_dict().items()}
        return metrics

    monkeypatch.setattr(harness.engine.trainer, "ppo_update", recorded_update)
    harness.engine.trainer.train(cfg)

    (llm,) = RecordingLLM.instances
    step = ["generate", "sleep(level=1)", "update", "empty_cache", "wake_up(['weights'])", "reload_weights",
            "empty_cache", "wake_up(['kv_cache'])"]
    # two RL steps, then the final evaluation generates with the weights of the last sync
    assert collapse(RecordingLLM.calls[1:]) == step + step + ["generate"]  # after "LLM": the engine's creation
    syncs = "".join("g" if c == "gather" else "l" for c in RecordingLLM.calls if c in ("gather", "load"))
    assert syncs == "gl" * (2 * len(llm.synced))  # streamed: each tensor loaded before the next is gathered
    assert llm.synced.keys() == recorded_update.weights.keys()
    assert all(torch.equal(llm.synced[k], recorded_update.weights[k]) for k in llm.synced)  # the updated weights
    assert llm.kwargs["enable_sleep_mode"] is True
    assert llm.kwargs["max_model_len"] == 256 + 12  # rollout.max_prompt_tokens + rollout.max_response_tokens
    assert llm.kwargs["tensor_parallel_size"] == 1


def test_the_engine_is_sized_from_the_rollout_limits_and_the_runs_gpus(tmp_path):
    cfg = toy_config(tmp_path, backend={"name": "vllm"}, grid={"gpus": 4})
    resolved = engine_config(cfg)
    assert (resolved.max_model_len, resolved.tensor_parallel_size) == (256 + 12, 4)
    fixed = engine_config(toy_config(tmp_path, backend={"name": "vllm", "max_model_len": 4096,
                                                        "tensor_parallel_size": 2}))
    assert (fixed.max_model_len, fixed.tensor_parallel_size) == (4096, 2)  # explicit settings stand
    assert engine_config(toy_config(tmp_path, grid={"gpus": 0})).tensor_parallel_size == 1  # a CPU profile


def test_a_vllm_outside_the_supported_range_is_refused_by_name():
    for version in ("0.32.0", "0.32.3", "0.32.0+cpu"):
        check_vllm_version(version)
    for version in ("0.31.0", "0.33.0", "0.34.0", "0.8.5"):
        with pytest.raises(ImportError, match=f"vLLM {version} is installed.*supports {SUPPORTED_TEXT}"):
            check_vllm_version(version)


def test_the_backend_checks_the_version_before_building_an_engine(tmp_path, fake_vllm):
    from harness.policy.backends import make_backend

    fake_vllm.__version__ = "0.34.0"
    model = SimpleNamespace(name_or_path=str(tmp_path))
    with pytest.raises(ImportError, match="vLLM 0.34.0 is installed"):
        make_backend(engine_config(toy_config(tmp_path, backend={"name": "vllm"})), model, None, "cpu")
    assert RecordingLLM.instances == []


@pytest.mark.parametrize("engine_error", [0.0, 3.0])
def test_sleep_level_2_is_checked_against_the_trainers_logprobs_after_each_sync(tmp_path, fake_vllm, engine_error):
    from harness.engine.run import open_run
    from harness.policy.backends import vllm_probe

    ctx = open_run(toy_config(tmp_path, backend={"name": "vllm", "sleep_level": 2}))
    prompt, response = vllm_probe.probe_ids(ctx.tokenizer)
    trainer = vllm_probe.trainer_logprobs(ctx.model, prompt, response, ctx.precision)
    RecordingLLM.probe_answer = lambda ids: [None] * len(prompt) + [
        {token: SimpleNamespace(logprob=float(lp) - engine_error)} for token, lp in zip(response, trainer)]
    ctx.backend.sleep()
    assert RecordingLLM.calls[-1] == "sleep(level=2)"  # the weights are discarded, not copied to the CPU
    if engine_error:
        with pytest.raises(RuntimeError, match="differ from the trainer's by 3.000 nats.*backend.sleep_level=1"):
            ctx.backend.sync_weights(ctx.model)
    else:
        ctx.backend.sync_weights(ctx.model)
        assert ctx.backend.probe_gaps == [pytest.approx(0.0, abs=1e-6)]
        assert collapse(RecordingLLM.calls)[-4:] == ["reload_weights", "empty_cache", "wake_up(['kv_cache'])", "probe"]
    ctx.close("FINISHED")


def test_a_full_fine_tune_sleeps_at_level_2_and_lora_at_level_1_by_default(tmp_path):
    full = engine_config(toy_config(tmp_path, backend={"name": "vllm"}))
    lora = engine_config(toy_config(tmp_path, backend={"name": "vllm"}, model={"lora_rank": 4}))
    assert (full.sleep_level, lora.sleep_level) == (2, 1)  # LoRA's sync never re-sends the base
    chosen = engine_config(toy_config(tmp_path, backend={"name": "vllm", "sleep_level": 1}))
    assert chosen.sleep_level == 1  # an explicit level stands


def test_the_sleep_level_is_not_part_of_a_runs_identity():
    """A run made at level 1 (the old default) is the same run at level 2: every sync rewrites the weights."""
    from harness.config import load_config
    from harness.records.identity import config_identity

    base = config_identity(load_config("config/smoke.yaml", ["backend.sleep_level=1"]))
    assert config_identity(load_config("config/smoke.yaml")) == base
    assert config_identity(load_config("config/smoke.yaml", ["backend.sleep_level=2"])) == base
    assert config_identity(load_config("config/smoke.yaml", ["rollout.group_size=3"])) != base


def test_after_a_level_2_sleep_the_engine_generates_only_once_the_weights_are_reloaded(tmp_path, fake_vllm):
    """Level 2 leaves garbage where the weights were (vllm#29341): the wake must be followed by a full reload
    before anything is sampled, as verl and TRL do; the trainer's order passes, a generate in between is refused."""
    from harness.engine.run import open_run
    from harness.policy.backends import vllm_probe

    ctx = open_run(toy_config(tmp_path, backend={"name": "vllm"}))  # the default: level 2 for a full fine-tune
    prompt, response = vllm_probe.probe_ids(ctx.tokenizer)
    trainer = vllm_probe.trainer_logprobs(ctx.model, prompt, response, ctx.precision)
    RecordingLLM.probe_answer = lambda ids: [None] * len(prompt) + [
        {token: SimpleNamespace(logprob=float(lp))} for token, lp in zip(response, trainer)]
    generate = dict(temperature=1.0, top_p=1.0, max_new_tokens=4, max_prompt_tokens=64, seed=0)
    ctx.backend.sleep()
    with pytest.raises(RuntimeError, match="discards its weights.*call sync_weights.*backend.sleep_level=1"):
        ctx.backend.generate(["a prompt"], **generate)
    assert "generate" not in collapse(RecordingLLM.calls)[-2:]  # refused before the engine sampled anything
    ctx.backend.sync_weights(ctx.model)
    assert collapse(RecordingLLM.calls)[-7:] == ["sleep(level=2)", "empty_cache", "wake_up(['weights'])",
                                                 "reload_weights", "empty_cache", "wake_up(['kv_cache'])", "probe"]
    ctx.backend.generate(["a prompt"], **generate)
    assert RecordingLLM.calls[-1] == "generate"
    ctx.close("FINISHED")


def test_the_weights_are_synced_once_the_gradients_are_freed(tmp_path, monkeypatch):
    """The sync wakes the engine's weights: the update's fp32 gradients must be gone by then (zero_grad first), or
    the wake meets a GPU still holding them (a 7B model's: 28 GiB over the ranks)."""
    import harness.engine.trainer as trainer

    grads_at_sync = []
    real_sync = trainer.distributed.sync_weights

    def recording_sync(backend, model):
        grads_at_sync.append(sum(p.grad is not None for p in model.parameters()))
        return real_sync(backend, model)

    monkeypatch.setattr(trainer.distributed, "sync_weights", recording_sync)
    trainer.train(toy_config(tmp_path, train={"steps": 2, "checkpoint_every": 10},
                             eval={"every": 10, "at_start": False}))
    assert grads_at_sync == [0, 0]  # one sync a step, every gradient freed before it


def test_lora_adapters_go_to_dev_shm_only_with_room_for_two_else_to_disk_else_a_named_error(monkeypatch, tmp_path):
    import shutil

    from harness.policy.backends import vllm as backend

    real = shutil.disk_usage
    free = {"/dev/shm": 64 * 2**20, "other": 10 * 2**30}  # Docker's default /dev/shm; a disk with room
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(backend.tempfile, "tempdir", None)  # re-read TMPDIR

    def usage(path):
        return real(path)._replace(free=free["/dev/shm" if str(path).startswith("/dev/shm") else "other"])

    monkeypatch.setattr(shutil, "disk_usage", usage)
    adapter = 645 * 10**6  # a 7B model's rank-64 adapter in fp32
    folder = backend._scratch_root(adapter)
    assert folder.parent == tmp_path  # not /dev/shm: it cannot hold two adapters
    free["other"] = 100 * 2**20
    assert "has 100 MiB free, but each LoRA sync writes a 615 MiB adapter" in backend._room_problem(folder, adapter)
    try:
        backend._scratch_root(adapter)
    except OSError as err:
        assert "point TMPDIR at a folder with 1230 MiB free" in str(err)
    else:
        raise AssertionError("no room anywhere must be an error")
    if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK):
        free["/dev/shm"] = 4 * 2**30
        shm = backend._scratch_root(adapter)
        assert str(shm).startswith("/dev/shm/")
        shutil.rmtree(shm)
