"""harness/memory_plan.py and `python -m harness plan`: the shipped paper profiles fit an 80 GB GPU, a full
fine-tune on one such GPU does not (exit 3, with what to change), the state rows are the parameter count of the
shipped Qwen2.5-7B-Instruct config.json times their bytes, and `train` refuses a plan that does not fit before it
loads any weight."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import memory_plan
from harness.config import load_config
from harness.memory_rows import Shape

REPO = Path(__file__).resolve().parent.parent
QWEN_7B_PARAMS = 7_615_616_512  # counted on the meta device; the figure for Qwen2.5-7B-Instruct
PEAK = re.compile(r"^peak (\d+\.\d) GiB per GPU of (\d+\.\d) GiB: (fits|does not fit)")


def plan_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "plan", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.mark.parametrize("profile", ["paper", "paper_lora"])
def test_shipped_paper_profiles_fit_an_80_gib_gpu(profile):
    done = plan_cli("--config", f"config/{profile}.yaml", "--gpu-gib", "80")
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    match = PEAK.match(last)
    assert match and match.group(3) == "fits" and float(match.group(1)) <= 80.0, last
    assert "the shipped copy" in done.stdout  # no weights here: the plan says it fell back to the shipped config


def test_full_fine_tune_on_one_80_gib_gpu_does_not_fit():
    done = plan_cli("--config", "config/paper.yaml", "--gpu-gib", "80", "train.strategy=single", "grid.gpus=1")
    assert done.returncode == memory_plan.EXIT_DOES_NOT_FIT, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert PEAK.match(last).group(3) == "does not fit"
    # what to change: the alternatives that fit
    assert "; change " in last and "train.strategy=fsdp grid.gpus=8" in last and "model.lora_rank=64" in last


def test_state_rows_are_the_parameter_count_times_bytes():
    single = memory_plan.make_plan(load_config("config/paper.yaml", ["train.strategy=single"]), 80)
    rows = {r.label.split(",")[0]: r.bytes for r in single.rows}
    assert memory_plan.model_shape(load_config("config/paper.yaml")).params == QWEN_7B_PARAMS
    assert rows["policy weights"] == QWEN_7B_PARAMS * 4  # fp32 master weights
    assert rows["gradients"] == QWEN_7B_PARAMS * 4
    assert rows["AdamW exp_avg + exp_avg_sq"] == QWEN_7B_PARAMS * 8
    sharded = memory_plan.make_plan(load_config("config/paper.yaml"), 80)  # FSDP over grid.gpus = 8
    rows8 = {r.label.split(",")[0]: r.bytes for r in sharded.rows}
    assert rows8["policy weights"] == QWEN_7B_PARAMS * 4 // 8 and rows8["AdamW exp_avg + exp_avg_sq"] == QWEN_7B_PARAMS
    printed = {line.split(" | ")[0].lstrip("| ").split(",")[0]: float(line.split(" | ")[1])
               for line in single.table().splitlines() if line.startswith("| ") and " | " in line[2:]
               and not line.startswith("| held") and not line.startswith("| **")}
    assert printed["policy weights"] == round(QWEN_7B_PARAMS * 4 / 2**30, 2) == 28.37


def test_lora_trains_the_adapter_only_and_keeps_the_base_in_the_compute_dtype():
    cfg = load_config("config/paper_lora.yaml")
    shape = memory_plan.model_shape(cfg)
    # peft's count on the meta device equals rank × (in + out) over the 7 linear layers of 28 decoder layers
    h, i, kv = 3584, 18944, 512
    assert shape.trained == 28 * 64 * (2 * (h + h) + 2 * (h + kv) + 3 * (h + i)) == 161_480_704
    assert shape.params - shape.trained == QWEN_7B_PARAMS
    weights = memory_plan.make_plan(cfg, 80).rows[0]
    assert weights.bytes == QWEN_7B_PARAMS * 2 + shape.trained * 4


def test_plan_reads_the_model_folders_config_json(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    config.save_pretrained(tmp_path)
    cfg = load_config("config/paper.yaml", [f"model.source={tmp_path}"])
    shape = memory_plan.model_shape(cfg)
    assert shape.params == Qwen2ForCausalLM(config).num_parameters() and str(tmp_path) in shape.source
    assert "shipped" not in shape.source
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 32}))
    with pytest.raises(Exception, match="model_type"):
        memory_plan.model_shape(cfg)


def test_plan_without_a_gpu_asks_for_its_memory():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the plan reads its memory")
    done = plan_cli("--config", "config/paper.yaml")
    assert done.returncode == 2 and "--gpu-gib" in done.stderr


def _on_a_fake_80_gib_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(memory_plan, "device_gib", lambda: 80.0)


def _cuda_config(tmp_path, *overrides):
    folder = tmp_path / "qwen7b"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(memory_plan.SHIPPED_CONFIG.read_text())  # the config, no weights
    return load_config("config/paper.yaml", [f"model.source={folder}", "backend.name=hf", "tracking.enabled=false",
                                             "train.device=cuda", f"output_dir={tmp_path / 'runs'}", *overrides])


def test_start_up_refuses_a_plan_that_does_not_fit_before_any_weight(tmp_path, monkeypatch, capsys):
    from harness import cli
    from harness.engine import run
    from harness.preflight import StartupError, check_start_up

    _on_a_fake_80_gib_gpu(monkeypatch)
    cfg = _cuda_config(tmp_path, "train.strategy=single", "grid.gpus=1")
    with pytest.raises(StartupError, match="does not fit") as err:
        check_start_up(cfg)
    assert "| gradients, fp32 | 28.37 |" in str(err.value)  # the table comes with the refusal
    check_start_up(cfg, training=False)  # evaluating a checkpoint needs no optimizer: not refused
    check_start_up(_cuda_config(tmp_path, "model.lora_rank=64"))  # LoRA on one GPU fits

    def no_weights(*args, **kwargs):
        raise AssertionError("weights were loaded before the memory plan was checked")

    monkeypatch.setattr(run, "prepare_policy", no_weights)
    folder = cfg.model.source
    code = cli.main(["train", "--config", "config/paper.yaml", f"model.source={folder}", "backend.name=hf",
                     "tracking.enabled=false", "train.device=cuda", f"output_dir={tmp_path / 'runs'}",
                     "train.strategy=single", "grid.gpus=1"])
    assert code == 2 and "does not fit" in capsys.readouterr().err


def _rows(*overrides: str, config: str = "config/paper.yaml") -> tuple[dict, "Shape", "memory_plan.Plan"]:
    cfg = load_config(config, list(overrides))
    plan = memory_plan.make_plan(cfg, 80)
    return {r.label.split(" (")[0].split(":")[0]: r for r in plan.rows}, memory_plan.model_shape(cfg), plan


def test_the_fsdp_layout_rows_are_their_arithmetic():
    from harness.memory_rows import LOGITS_BACKWARD_EXTRA_BYTES

    rows, shape, plan = _rows()  # FSDP over 8 GPUs, vLLM
    assert rows["FSDP root unit's gradients in fp32 for the reduce-scatter"].bytes == 4 * shape.root_params
    assert rows["FSDP root unit's gradients in fp32 for the reduce-scatter"].phases == ("bwd",)
    assert LOGITS_BACKWARD_EXTRA_BYTES == 16
    assert rows["logits of 512 response tokens and their gradient"].bytes == 8 * 512 * shape.vocab * (2 + 16)
    persistent = sum(r.bytes for r in plan.rows if len(r.phases) == 4 and not r.allowance)
    update = max(plan.phase_bytes(p, reserve=False) for p in ("score", "bwd", "step"))
    cached = rows["PyTorch's cached-but-free blocks at the engine's wake"]
    assert cached.bytes == 0 and f"would be {(update - persistent) / 2**30:.1f} GiB" in cached.label
    assert "FSDP + hf generation" not in rows
    hf_rows, shape, _ = _rows("backend.name=hf")
    rest = shape.params - shape.root_params - 2 * shape.layer_params
    assert hf_rows["FSDP + hf generation"].bytes == 2 * rest and hf_rows["FSDP + hf generation"].phases == ("gen",)
    assert "PyTorch's cached-but-free blocks at the engine's wake" not in hf_rows  # one allocator: reused
    lora_rows, _, _ = _rows(config="config/paper_lora.yaml")
    assert "FSDP root unit's gradients in fp32 for the reduce-scatter" not in lora_rows  # one GPU, a frozen root


def test_the_plan_command_prints_the_layout_rows_and_its_verdict():
    done = plan_cli("--config", "config/paper.yaml", "--gpu-gib", "80")
    assert "cached-but-free blocks at the engine's wake" in done.stdout
    assert "root unit's gradients in fp32" in done.stdout
    assert PEAK.match(done.stdout.strip().splitlines()[-1])


def test_the_reserve_is_train_memory_reserve_gib_in_every_phase_and_decides_the_fit():
    """6 GiB by default (CUDA context and graphs, NCCL, fragmentation: 6-8 is typical; 5% of 80 GB was 4), the same
    on any GPU, and counted in the fit; it is planning only, never part of a run's identity."""
    from harness.memory_rows import GIB, PHASES
    from harness.records.identity import config_identity

    cfg = load_config("config/paper_1p5b.yaml")
    for gpu_gib in (80, 139):
        (reserve,) = [r for r in memory_plan.make_plan(cfg, gpu_gib).rows if r.allowance]
        assert reserve.bytes == 6 * GIB and set(reserve.phases) == set(PHASES)
    base = memory_plan.make_plan(cfg, 80)
    roomy = load_config("config/paper_1p5b.yaml", ["train.memory_reserve_gib=8"])
    assert memory_plan.make_plan(roomy, 80).peak_gib() == pytest.approx(base.peak_gib() + 2)
    needed = 80 - base.peak_gib(reserve=False)  # the largest reserve that still fits
    assert memory_plan.make_plan(load_config("config/paper_1p5b.yaml", [f"train.memory_reserve_gib={needed - 0.1}"]),
                                 80).fits
    assert not memory_plan.make_plan(load_config("config/paper_1p5b.yaml",
                                                 [f"train.memory_reserve_gib={needed + 0.1}"]), 80).fits
    assert config_identity(roomy) == config_identity(cfg)
