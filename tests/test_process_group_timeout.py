"""train.process_group_timeout_min: one typed field with a range; the FSDP process group waits that long (30 min
by default, not 3 h), and the setting does not change a run's identity (a timeout never changes what a run computes)."""
from __future__ import annotations

from datetime import timedelta

import pytest

from harness.config import load_config
from harness.core.typed import ConfigError
from harness.engine.distributed import process_group_timeout
from harness.records.identity import config_identity


def test_the_default_is_30_minutes_and_an_override_is_read():
    assert process_group_timeout(load_config("config/smoke.yaml")) == timedelta(minutes=30)
    assert process_group_timeout(load_config("config/smoke.yaml", ["train.process_group_timeout_min=90"])) == \
        timedelta(minutes=90)


@pytest.mark.parametrize("value", [0, -5, 1441])
def test_out_of_range_is_refused_by_name(value):
    with pytest.raises(ConfigError, match=r"process_group_timeout_min: .* is out of range; accepted: \(0, 1440\]"):
        load_config("config/smoke.yaml", [f"train.process_group_timeout_min={value}"])


def test_the_timeout_is_not_part_of_a_runs_identity():
    base = config_identity(load_config("config/smoke.yaml"))
    assert config_identity(load_config("config/smoke.yaml", ["train.process_group_timeout_min=120"])) == base
    assert config_identity(load_config("config/smoke.yaml", ["train.lr=0.5"])) != base
