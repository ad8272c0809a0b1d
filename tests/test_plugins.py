"""``Registry[T]``, the one registry every plug-in kind uses (methods, benchmarks, backends, teacher contexts)."""
from __future__ import annotations

import pytest

from harness.core.plugins import Registry, UnknownPluginError


def test_register_get_and_available():
    things: Registry[type] = Registry("thing")

    @things.register("b")
    class B:
        pass

    things.add("a", int)
    assert things.get("b") is B and things.available() == ["a", "b"] and "a" in things and "z" not in things


def test_an_unknown_name_lists_the_known_ones_and_the_hint():
    things: Registry[type] = Registry("thing", hint="Add one with @THINGS.register.")
    things.add("known", int)
    with pytest.raises(UnknownPluginError, match=r"unknown thing 'other'; known: known\. Add one with"):
        things.get("other")


def test_a_second_plugin_under_one_name_is_an_error_the_same_one_again_is_not():
    things: Registry[type] = Registry("thing")
    things.add("x", int)
    things.add("x", int)
    with pytest.raises(ValueError, match="registered twice"):
        things.add("x", str)


def test_lazy_entries_import_on_first_get_and_are_checked_then():
    checked = []
    things: Registry[object] = Registry("thing", check=lambda name, plugin: checked.append((name, plugin)))
    things.add("dumps", "json:dumps")
    assert checked == []
    import json

    assert things.get("dumps") is json.dumps and checked == [("dumps", json.dumps)]


def test_an_import_error_inside_a_plugin_propagates():
    things: Registry[object] = Registry("thing")
    things.add("broken", "no_such_module_here:Thing")
    with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
        things.get("broken")


def test_discovery_runs_for_a_missing_name():
    def discover(name):
        if name in (None, "late"):
            things.add("late", float)

    things: Registry[type] = Registry("thing", discover=discover)
    assert things.get("late") is float
