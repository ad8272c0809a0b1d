"""harness/config.py: loading, overrides, and errors that name the key and the accepted values."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.config import RunConfig, config_from_dict, load_config, parse_overrides
from harness.config_sections import ModelConfig, TrainConfig
from harness.core.typed import ConfigError, build_dataclass

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path, data) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_defaults_are_the_paper_protocol():
    cfg = load_config()
    assert isinstance(cfg, RunConfig)
    t = cfg.train
    assert ((t.clip_ratio, t.clip_ratio_c, t.kl_coef, t.kl_estimator, t.loss_agg_mode)
            == (0.2, 3.0, 0.01, "k3", "token-mean"))
    assert (cfg.rollout.group_size, cfg.rollout.tasks_per_step, cfg.rollout.temperature) == (8, 16, 1.0)
    assert cfg.method.name == "grpo"


def test_unknown_key_names_it_and_lists_accepted(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, {"train": {"clip_ration": 0.3}}))
    message = str(err.value)
    assert "config.train: unknown key(s) ['clip_ration']" in message
    assert "'clip_ratio'" in message and "'kl_coef'" in message


def test_unknown_top_level_key(tmp_path):
    with pytest.raises(ConfigError, match=r"config: unknown key\(s\) \['benchmarkk'\]; accepted keys: \[.*'benchmark'"):
        load_config(write(tmp_path, {"benchmarkk": "alfworld"}))


def test_bad_literal_lists_choices():
    with pytest.raises(ConfigError,
                       match=r"config.train.kl_estimator: 'k5' is not accepted; choose one of \['k1', 'k2', 'k3'\]"):
        load_config(overrides=["train.kl_estimator=k5"])


def test_wrong_type_names_key():
    with pytest.raises(ConfigError, match=r"config.train.steps: expected int, got str 'many'"):
        load_config(overrides=["train.steps=many"])


def test_override_parsing():
    assert parse_overrides(["method.lam=0.2", "seed=3", "train.loss_agg_mode=seq-mean-token-sum"]) == {
        "method": {"lam": 0.2},
        "seed": 3,
        "train": {"loss_agg_mode": "seq-mean-token-sum"},
    }
    with pytest.raises(ConfigError, match="key.sub=value"):
        parse_overrides(["method.lam"])


def test_method_options_from_yaml_and_overrides(tmp_path):
    path = write(tmp_path, {"method": {"name": "sharpo", "lam": 0.05}})
    cfg = load_config(path, ["method.lam=0.2", "method.signed=false"])
    assert cfg.method.name == "sharpo"
    assert cfg.method.options == {"lam": 0.2, "signed": False}
    assert cfg.method_label == "sharpo-lam0.2-signedFalse"
    cfg = load_config(overrides=["method.name=rlsd", "method.warmdown_steps=10"])
    assert cfg.method.options == {"warmdown_steps": 10}


def test_method_option_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"method \(sharpo\): unknown key\(s\) \['lamda'\]; accepted keys: \[.*'lam'"):
        load_config(overrides=["method.name=sharpo", "method.lamda=0.2"])
    with pytest.raises(ConfigError, match=r"method \(gigpo\)\.mode: 'mean' is not accepted; "
                                          r"choose one of \['mean_norm', 'mean_std_norm'\]"):
        load_config(overrides=["method.name=gigpo", "method.mode=mean"])


def test_unknown_method_name_lists_registered():
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["method.name=shapro"])
    message = str(err.value)
    assert "method.name: unknown method 'shapro'" in message
    for name in ("grpo", "gigpo", "rlsd", "sdar", "grpo_opsd", "stepopsd", "sharpo"):
        assert name in message


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_build_dataclass_coerces_int_to_float_and_rejects_bool_for_number():
    assert build_dataclass(TrainConfig, {"clip_ratio": 1}).clip_ratio == 1.0
    with pytest.raises(ConfigError, match="config.kl_coef: expected float, got bool"):
        build_dataclass(TrainConfig, {"kl_coef": True})


def test_per_benchmark_settings_apply_to_that_benchmark_only_and_overrides_win(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("model: {warm_start_prompt_loss: 0.2}\n"
                    "per_benchmark: {webshop: {model: {warm_start_prompt_loss: 1.0}, train: {lr: 0.5}}}\n")
    assert load_config(path, ["benchmark=alfworld"]).model.warm_start_prompt_loss == 0.2
    webshop = load_config(path, ["benchmark=webshop"])
    assert webshop.model.warm_start_prompt_loss == 1.0 and webshop.train.lr == 0.5
    assert webshop.model.tiny_hidden == ModelConfig().tiny_hidden  # the rest of the section is kept
    assert load_config(path, ["benchmark=webshop", "train.lr=0.1"]).train.lr == 0.1


def test_per_benchmark_typos_fail_for_every_benchmark(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("per_benchmark: {webshop: {model: {warm_start_prompt_los: 1.0}}}\n")
    with pytest.raises(ConfigError, match=r"per_benchmark.webshop.model: unknown key\(s\) \['warm_start_prompt_los'\]"):
        load_config(path, ["benchmark=alfworld"])
    path.write_text("per_benchmark: {webshopp: {train: {lr: 0.1}}}\n")
    with pytest.raises(ConfigError, match="per_benchmark: expected a mapping from benchmark names"):
        load_config(path, [])


def test_a_benchmark_registered_outside_harness_gets_its_section_validated_by_its_own_config():
    import tests.toy_benchmark  # noqa: F401  (registers `toy`, as a benchmark package does)

    cfg = config_from_dict({"benchmark": "toy", "toy": {"train_tasks": 4}})
    assert type(cfg.benchmark_config).__name__ == "DoorConfig" and cfg.benchmark_config.train_tasks == 4
    with pytest.raises(ConfigError, match=r"toy: unknown key\(s\) \['train_taskz'\]"):
        config_from_dict({"benchmark": "toy", "toy": {"train_taskz": 4}})
    with pytest.raises(ConfigError, match=r"toy.train_tasks: 0 is out of range; accepted: >= 1"):
        config_from_dict({"benchmark": "toy", "toy": {"train_tasks": 0}})
    with pytest.raises(ConfigError, match=r"benchmark: unknown benchmark 'nope'; known: .*toy"):
        config_from_dict({"benchmark": "nope"})


def test_a_section_of_another_benchmark_is_still_checked():
    with pytest.raises(ConfigError, match=r"webshop: unknown key\(s\) \['max_stepz'\]"):
        config_from_dict({"benchmark": "alfworld", "webshop": {"max_stepz": 3}})


def test_to_dict_writes_the_benchmark_section_under_its_name_and_round_trips():
    from harness.config import to_dict

    cfg = load_config(ROOT / "config" / "tiny.yaml", ["benchmark=webshop"])
    raw = to_dict(cfg)
    assert "benchmark_options" not in raw and raw["webshop"]["asin_length"] == 3
    assert config_from_dict(raw) == cfg


def test_think_and_the_step_limit_have_one_key_each():
    with pytest.raises(ConfigError, match=r"alfworld: unknown key\(s\) \['think'\]"):
        config_from_dict({"benchmark": "alfworld", "alfworld": {"think": True}})
    with pytest.raises(ConfigError, match=r"rollout: unknown key\(s\) \['max_env_steps'\]"):
        config_from_dict({"rollout": {"max_env_steps": 5}})


def test_profile_extends_another_and_overrides_only_what_it_names(tmp_path):
    (tmp_path / "base.yaml").write_text("seed: 3\ntrain:\n  steps: 7\n  lr: 1.0e-4\ngrid:\n  seeds: [0, 1, 2]\n")
    (tmp_path / "child.yaml").write_text("extends: base\ntrain:\n  steps: 2\ngrid:\n  seeds: [5]\n")
    cfg = load_config(tmp_path / "child.yaml")
    assert (cfg.seed, cfg.train.steps, cfg.train.lr, cfg.grid.seeds) == (3, 2, 1.0e-4, [5])


def test_profile_extends_cycle_or_missing_parent_is_a_config_error(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b\n")
    (tmp_path / "b.yaml").write_text("extends: a\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("extends: nowhere\n")
    with pytest.raises(ConfigError, match="names no profile"):
        load_config(tmp_path / "c.yaml")


def test_sweep_profile_is_the_cpu_profile_but_for_its_grid():
    cpu, sweep = load_config("config/cpu.yaml"), load_config("config/sweep.yaml")
    assert (sweep.model, sweep.rollout, sweep.train) == (cpu.model, cpu.rollout, cpu.train)
    assert sweep.benchmark_config == cpu.benchmark_config
