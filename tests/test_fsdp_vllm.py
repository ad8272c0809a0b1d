"""The paper profile's layout end to end on the CPU: ``harness train`` under torchrun (2 gloo ranks,
``train.strategy=fsdp``) with ``backend.name=vllm``, the ``vllm`` package replaced by the recording stand-in of
tests/stand_in_vllm (no vLLM runs; the real one under the external launcher is ``make test-vllm``'s). It shows what
each rank's engine is built with and receives: its own engine inside torchrun's group, a seed of its own, the
cache emptied before every wake, and every sync streamed one full (unsharded) tensor at a time."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
STAND_IN = ROOT / "tests" / "stand_in_vllm"


def _launch(work: Path, *overrides: str) -> list[list[dict]]:
    (work / "log").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RANK", "WORLD_SIZE")}
    env.update(HF_HUB_OFFLINE="1", STAND_IN_VLLM_LOG=str(work / "log"),
               PYTHONPATH=os.pathsep.join([str(STAND_IN), str(ROOT), env.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
               "harness", "train", "--config", "config/smoke.yaml", "train.strategy=fsdp", "backend.name=vllm",
               "backend.sleep_level=1",  # level 2's probe needs an engine that scores: the stand-in only records
               "model.dtype=float32", "tracking.enabled=false", "eval.panel_size=2", "alfworld.max_steps=4",
               f"output_dir={work}/runs", f"model.cache_dir={work}/models", *overrides]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return [[json.loads(line) for line in (work / "log" / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)]


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> tuple[Path, list[list[dict]]]:
    work = tmp_path_factory.mktemp("fsdp_vllm")
    return work, _launch(work)


def _events(log: list[dict]) -> list[str]:
    return [e["event"] for e in log if e["event"] != "load"]


def test_each_rank_builds_one_engine_in_torchruns_group(launched):
    _, logs = launched
    built = [[e for e in log if e["event"] == "LLM"] for log in logs]
    assert [len(b) for b in built] == [1, 1]
    (first,), (second,) = built
    for rank, engine in enumerate((first, second)):
        assert engine["kwargs"]["distributed_executor_backend"] == "external_launcher"
        assert engine["kwargs"]["tensor_parallel_size"] == 1
        assert engine["environ"] == {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                                     "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
        assert engine["group_world_size"] == 2  # built inside the launcher's process group, not one of its own
    assert first["kwargs"]["seed"] != second["kwargs"]["seed"]


def test_every_wake_follows_an_emptied_cache(launched):
    _, logs = launched
    for log in logs:
        events = _events(log)
        wakes = [i for i, e in enumerate(events) if e == "wake_up"]
        assert len(wakes) >= 3  # weights and KV cache after the first sync, weights after the second
        assert all(events[i - 1] == "empty_cache" for i in wakes)


def test_every_sync_streams_the_full_tensors_every_rank_alike(launched):
    work, logs = launched
    syncs = []
    for log in logs:
        rank_syncs = []
        for event in log:
            if event["event"] == "reload_weights":
                assert event["streamed"]  # a generator: one tensor gathered and loaded at a time
                rank_syncs.append({})
            elif event["event"] == "load":
                rank_syncs[-1][event["name"]] = event
        syncs.append(rank_syncs)
    assert len(syncs[0]) == len(syncs[1]) == 2  # one per RL step
    final = torch.load(work / "runs" / "alfworld" / "grpo" / "seed0" / "checkpoint.pt", weights_only=False)["model"]
    for rank_syncs in syncs:
        last = rank_syncs[-1]
        assert last.keys() == final.keys()
        for name, tensor in final.items():
            assert last[name]["shape"] == list(tensor.shape)  # the full tensor, not this rank's shard
            assert last[name]["sum"] == pytest.approx(float(tensor.double().sum()), rel=1e-6, abs=1e-6)


def test_under_lora_every_rank_hands_its_engine_the_whole_adapter(tmp_path):
    """LoRA + FSDP: no weights are synced (the base is frozen); each rank writes the full (gathered) adapter, under
    peft's names, and generates with it. The ranks' adapters of one sync are the same; rank 0's last (its final
    evaluation's) is the adapter it checkpointed."""
    logs = _launch(tmp_path, "model.lora_rank=4", "model.lora_alpha=8")
    state = torch.load(tmp_path / "runs" / "alfworld" / "grpo" / "seed0" / "checkpoint.pt", weights_only=False)["model"]
    final = {name.replace(".default.", "."): tensor for name, tensor in state.items() if ".lora_" in name}
    by_id = []
    for log in logs:
        assert not any(e["event"] in ("reload_weights", "load") for e in log)
        (llm,) = [e for e in log if e["event"] == "LLM"]
        assert llm["kwargs"]["enable_lora"] is True and llm["kwargs"]["max_lora_rank"] == 8
        adapters = [e["adapter"] for e in log if e["event"] == "generate"]
        assert adapters and all(a is not None for a in adapters)
        by_id.append({a["id"]: a for a in adapters})
        for adapter in adapters:  # peft's names, full shapes (gathered from both ranks' shards)
            assert adapter["shapes"] == {name: list(t.shape) for name, t in final.items()}
    shared = by_id[0].keys() & by_id[1].keys()
    assert len(shared) >= 2 and all(by_id[0][i]["sums"] == by_id[1][i]["sums"] for i in shared)
    last = by_id[0][max(by_id[0])]
    for name, tensor in final.items():
        assert last["sums"][name] == pytest.approx(float(tensor.double().sum()), rel=1e-6, abs=1e-6)
