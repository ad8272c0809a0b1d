"""The one path a config value is checked on: ranges declared in field metadata, checked when a config is built.

A field declares its range as metadata, ``field(default=..., metadata={"help": ..., "range": ">= 1"})``; the forms
are ``>= a``, ``> a``, ``<= b``, ``< b`` and intervals ``[a, b]``, ``(a, b]``, ``[a, b)``, ``(a, b)``. ``None`` is
always accepted where the type allows it (it means "the default"), and a list is checked item by item. A
``Literal[...]`` field accepts only its listed values.

Every config dataclass (the run config's sections, each method's and each benchmark's options) derives from
:class:`Checked`: its ``__post_init__`` checks these declarations, so a config is valid wherever it was built (a
YAML file, the command line, or code). Rules that span fields go in the config's own ``__post_init__``, after
``super().__post_init__()``, and raise :class:`~harness.core.typed.ConfigError` too.
"""
from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from harness.core.typed import ConfigError

NUMBER = r"[-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|inf)"
_BOUND = re.compile(rf"^(>=|>|<=|<)\s*({NUMBER})$")
_INTERVAL = re.compile(rf"^([\[(])\s*({NUMBER})\s*,\s*({NUMBER})\s*([\])])$")


@dataclass(frozen=True)
class Range:
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    text: str = ""

    @classmethod
    def parse(cls, text: str) -> "Range":
        text = text.strip()
        bound = _BOUND.match(text)
        if bound:
            op, value = bound.group(1), float(bound.group(2))
            if op.startswith(">"):
                return cls(low=value, low_open=op == ">", text=text)
            return cls(high=value, high_open=op == "<", text=text)
        interval = _INTERVAL.match(text)
        if interval:
            left, low, high, right = interval.groups()
            return cls(float(low), float(high), left == "(", right == ")", text)
        raise ValueError(f"range {text!r} is not one of '>= a', '> a', '<= b', '< b', '[a, b]', '(a, b]', ...")

    def accepts(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below


class Checked:
    """Base of every config dataclass: ranges and ``Literal`` choices are checked at construction.

    ``section`` is the key prefix errors name (``rollout`` → ``rollout.group_size: 0 is out of range``)."""

    section: ClassVar[str] = ""

    def __post_init__(self) -> None:
        check_fields(self, self.section)


def check_fields(obj: Any, where: str) -> None:
    """Check every field of dataclass ``obj`` that declares a range or is a ``Literal``; errors name the key.
    Nested dataclasses are not entered: each checks itself when it is built."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{where}.{f.name}" if where else f.name
        if typing.get_origin(hints[f.name]) is Literal and value not in typing.get_args(hints[f.name]):
            raise ConfigError(f"{key}: {value!r} is not accepted; choose one of {list(typing.get_args(hints[f.name]))}")
        spec = f.metadata.get("range")
        if spec is None or value is None:
            continue
        allowed = Range.parse(spec)
        for item in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(item, (int, float)) and not isinstance(item, bool) and not allowed.accepts(item):
                raise ConfigError(f"{key}: {item!r} is out of range; accepted: {allowed.text}"
                                  + (f" ({f.metadata['help']})" if f.metadata.get("help") else ""))


def _is_numeric(tp) -> bool:
    """int or float, optionally inside Optional[...] or list[...] (bool is not a number here)."""
    if tp in (int, float):
        return True
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType, list, tuple):
        return any(_is_numeric(arg) for arg in typing.get_args(tp) if arg is not type(None))
    return False


def numeric_fields_without_range(classes) -> list[str]:
    """``Class.field`` for every int/float field (in nested dataclasses too) that declares no range."""
    missing, seen = [], set()

    def walk(cls):
        if cls in seen:
            return
        seen.add(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            if dataclasses.is_dataclass(tp):
                walk(tp)
            elif _is_numeric(tp) and "range" not in f.metadata:
                missing.append(f"{cls.__name__}.{f.name}")

    for cls in classes:
        walk(cls)
    return missing
