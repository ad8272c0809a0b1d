"""Every numeric key is range-checked when the config loads, and YAML errors name the file and line (issue 18)."""
from __future__ import annotations

import dataclasses

import pytest

from harness.config import RunConfig, load_config
from harness.core.typed import ConfigError


@pytest.mark.parametrize("override,key,accepted", [
    ("rollout.group_size=0", "rollout.group_size", ">= 1"),  # the field's own range, checked as it is built
    ("rollout.group_size=1", "rollout.group_size", ">= 2"),  # then what the method (GRPO) needs
    ("train.checkpoint_every=0", "train.checkpoint_every", ">= 1"),
    ("train.lr=-5", "train.lr", ">= 0"),
    ("train.steps=0", "train.steps", ">= 1"),
])
def test_table_rows_fail_at_load_with_key_value_and_range(override, key, accepted):
    with pytest.raises(ConfigError) as err:
        load_config("config/smoke.yaml", [override])
    message = str(err.value)
    assert key in message and override.split("=")[1] in message and accepted in message


def test_group_size_one_is_refused_for_a_method_that_needs_groups_only():
    with pytest.raises(ConfigError, match=r"rollout.group_size.*grpo.*>= 2"):
        load_config("config/smoke.yaml", ["rollout.group_size=1"])


@pytest.mark.parametrize("override", [
    "rollout.temperature=-1", "rollout.top_p=0", "rollout.top_p=1.5", "rollout.tasks_per_step=0",
    "rollout.max_response_tokens=0", "alfworld.max_steps=0", "rollout.env_workers=-1",
    "train.ppo_mini_batch=0", "train.ppo_micro_batch=0", "train.ppo_epochs=0", "train.clip_ratio=0",
    "train.clip_ratio_c=1", "train.kl_coef=-0.1", "train.grad_clip=0", "train.weight_decay=-1",
    "train.cpu_threads=-1", "eval.every=-1", "eval.panel_size=0", "eval.temperature=-0.5",
    "backend.gpu_memory_utilization=1.5", "backend.tensor_parallel_size=0", "model.tiny_layers=0",
    "model.warm_start_lr=0", "model.warm_start_warmup=2", "model.warm_start_batch=0", "seed=-1",
    "alfworld.max_steps=0", "webshop.request_timeout_s=0", "webshop.max_option_groups=4",
    "method=sharpo", "method=rlsd",
])
def test_other_numeric_keys_are_range_checked(override):
    extra = {"method=sharpo": ["method.lam=1.5"], "method=rlsd": ["method.warmdown_steps=0"]}.get(override, [])
    with pytest.raises(ConfigError, match="accepted"):
        load_config("config/smoke.yaml", [override, *extra])


def test_every_numeric_field_declares_its_range():
    """A new numeric key without a declared range would go unchecked: every int/float field carries one."""
    from envs.base import BENCHMARKS
    from harness.core import registry
    from harness.core.ranges import numeric_fields_without_range

    classes = [RunConfig, *(registry.get(name).Config for name in registry.available()),
               *(BENCHMARKS.get(name).Config for name in BENCHMARKS.available())]
    assert numeric_fields_without_range(classes) == []


def test_shipped_profiles_pass_the_checks():
    """Every profile in config/, for every benchmark its grid runs (a new profile file is covered by being there)."""
    from pathlib import Path

    profiles = sorted(Path("config").glob("*.yaml"))
    assert {"cpu", "tiny", "smoke", "paper", "paper_lora", "smol"} <= {p.stem for p in profiles}
    for path in profiles:
        for benchmark in load_config(path).grid.benchmarks:
            cfg = load_config(path, [f"benchmark={benchmark}"])
            assert cfg.profile == path.stem  # the Snakefile finds a profile by name in config/


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("profile: smoke\ntrain:\n  steps: 2\n  lr: [1e-4\nrollout:\n  group_size: 2\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message and "line 5" in message
    assert len(message.splitlines()) <= 4


def test_yaml_error_through_the_cli_is_one_line_not_a_traceback(tmp_path, capsys):
    from harness.cli import main

    path = tmp_path / "broken.yaml"
    path.write_text("train:\n  steps: 2\n   lr: 1\n")
    assert main(["protocol", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "line 3" in err and "Traceback" not in err


def test_ranges_are_field_metadata_with_help():
    from harness.config_sections import TrainConfig

    steps = {f.name: f for f in dataclasses.fields(TrainConfig)}["steps"]
    assert steps.metadata["range"] == ">= 1" and steps.metadata["help"]
