"""harness/core/registry.py: lookup, clear errors, duplicate names, dotted-path loading."""
from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest

from harness.core import registry
from harness.core.ranges import Checked
from harness.core.registry import Method, UnknownMethodError, register
from harness.core.typed import ConfigError


def test_unknown_name_lists_registered_methods():
    with pytest.raises(UnknownMethodError) as err:
        registry.get("sharpoo")
    message = str(err.value)
    assert "unknown method 'sharpoo'" in message
    for name in ("grpo", "gigpo", "rlsd", "sdar", "grpo_opsd", "stepopsd", "sharpo"):
        assert name in message
    assert "mypkg.mymethod:MyMethod" in message  # says how to name a method of one's own


def test_build_rejects_unknown_option_and_lists_accepted():
    with pytest.raises(ConfigError, match=r"method \(sharpo\): unknown key\(s\) \['lamda'\]; accepted keys: \[.*'lam'"):
        registry.build("sharpo", {"lamda": 0.2})


def test_build_checks_literal_options():
    with pytest.raises(ConfigError,
                       match=r"method \(sharpo\)\.reduce: 'median' is not accepted; choose one of \['mean', 'sum'\]"):
        registry.build("sharpo", {"reduce": "median"})


@dataclass
class _Cfg(Checked):
    x: int = 1


def test_duplicate_name_is_an_error():
    class First(Method):
        Config = _Cfg

    class Second(Method):
        Config = _Cfg

    register("dup_test_method")(First)
    try:
        with pytest.raises(ValueError, match="registered twice"):
            register("dup_test_method")(Second)
        with pytest.raises(ValueError, match="registered twice"):
            register("grpo")(Second)  # a built-in name cannot be taken either
    finally:
        registry.METHODS.unregister("dup_test_method")


def test_bad_teacher_and_config_are_rejected():
    class BadTeacher(Method):
        Config = _Cfg
        teacher = "oracle"

    with pytest.raises(ValueError, match="teacher='oracle'"):
        register("bad_teacher_test")(BadTeacher)

    class NoDataclass(Method):
        Config = dict

    with pytest.raises(TypeError, match="Config must be a dataclass"):
        register("bad_config_test")(NoDataclass)


def test_dotted_path_errors_are_clear(tmp_path, monkeypatch):
    with pytest.raises(UnknownMethodError, match="cannot import module 'no_such_pkg_xyz'"):
        registry.get("no_such_pkg_xyz:Thing")
    with pytest.raises(UnknownMethodError, match="does not name a Method subclass"):
        registry.get("harness.core.registry:register")


def test_dotted_subclass_of_a_builtin_gets_its_own_name(tmp_path, monkeypatch):
    (tmp_path / "sub_method_tmp.py").write_text(
        "from methods.grpo import Grpo\n\nclass MyGrpo(Grpo):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        cls = registry.get("sub_method_tmp:MyGrpo")
        assert cls.name == "mygrpo" and registry.get("grpo").name == "grpo"
    finally:
        sys.modules.pop("sub_method_tmp", None)
        registry.METHODS.unregister("mygrpo")
