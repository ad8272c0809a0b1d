"""Config help from the fields: every key carries ``metadata["help"]``, and ``python -m harness train --help`` lists
every key with its default and its meaning (harness/config_help.py)."""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from harness import config_help
from harness.config import RunConfig
from harness.core import registry

ROOT = Path(__file__).resolve().parents[1]


def keys_without_help(cls: type, prefix: str = "") -> list[str]:
    return [key for f, key, _ in config_help.walk(cls, prefix) if not config_help.field_help(f)]


def squash(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def train_help() -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", COLUMNS="120")
    done = subprocess.run([sys.executable, "-m", "harness", "train", "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_run_config_field_declares_its_help():
    assert keys_without_help(RunConfig) == []


@pytest.mark.parametrize("name", registry.available())
def test_every_method_option_declares_its_help(name):
    assert keys_without_help(registry.get(name).Config, "method.") == []


@dataclass
class Inner:
    documented: int = field(default=1, metadata={"help": "has one"})
    bare: int = 2


@dataclass
class Outer:
    inner: Inner = field(default_factory=Inner)  # a section without help is caught too


@dataclass
class Sample:
    mode: Literal["a", "b"] = "a"
    size: int | None = None
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    rate: float = 1e-6
    flag: bool = True


def test_a_field_without_help_is_caught():
    assert keys_without_help(Outer) == ["inner", "inner.bare"]
    rows = {row.key: row for row in config_help.keys_of(Outer)}
    assert set(rows) == {"inner.documented", "inner.bare"}
    assert "(no help declared)" in config_help.format_key(rows["inner.bare"])


def test_type_and_default_text():
    rows = {row.key: (row.type, row.default) for row in config_help.keys_of(Sample)}
    assert rows == {"mode": ("a|b", "a"), "size": ("int or null", "null"), "seeds": ("list of int", "[0, 1]"),
                    "rate": ("float", "1.0e-06"), "flag": ("bool", "true")}


def test_train_help_lists_every_key_with_default_and_meaning(train_help):
    flat = squash(train_help)
    for row in config_help.keys_of(RunConfig, skip=("method.options", "benchmark_options")):
        assert f"{row.key} = {row.default} ({row.type}) {squash(row.help)}" in flat, row.key
    assert "method.options" not in train_help  # listed per method instead
    assert "benchmark_options" not in train_help  # listed per benchmark, as its own section


def test_train_help_lists_every_benchmark_section_from_its_own_config(train_help):
    from envs.base import BENCHMARKS

    flat = squash(train_help)
    shipped = [n for n in BENCHMARKS.available() if BENCHMARKS.get(n).__module__.startswith("envs.")]
    assert {"alfworld", "webshop", "gates"} <= set(shipped)
    for name in shipped:  # (a benchmark another test registered is not known to the `--help` process)
        assert f"{name}: options of benchmark={name}" in flat
        for row in config_help.keys_of(BENCHMARKS.get(name).Config, f"{name}."):
            assert f"{row.key} = {row.default} ({row.type}) {squash(row.help)}" in flat, row.key


def test_train_help_lists_every_method_option(train_help):
    sections = {m.group(1): m.group(0)
                for m in re.finditer(r"^method=(\w+) .*?(?=^method=|\Z)", train_help, re.M | re.S)}
    assert set(sections) == set(registry.available())

    def listed(name: str) -> set[str]:  # its own section, plus the section of the method it says it extends
        extends = re.search(r"the options of (\w+), plus", sections[name].splitlines()[0])
        own = set(re.findall(r"^  method\.(\w+) = ", sections[name], re.M))
        return own | (listed(extends.group(1)) if extends else set())

    for name in registry.available():
        assert listed(name) == {f.name for f in dataclasses.fields(registry.get(name).Config)}, name


def test_the_key_list_is_built_only_for_help():
    from harness.cli import _parser

    parser = _parser()
    args = parser.parse_args(["train", "--config", "config/tiny.yaml", "seed=1"])  # no help: nothing generated
    assert args.overrides == ["seed=1"]
    train = parser._subparsers._group_actions[0].choices["train"]
    assert "config keys" not in (train.epilog or "")
