"""The key list of ``python -m harness <command> --help``, generated from the config dataclasses themselves.

A key's meaning is its field's ``metadata["help"]`` (TRL style) and its default is the field's default, so the
list cannot drift from the code: a new field shows up with whatever help it was declared with. Method options
come from each registered method's ``Config``.
"""
from __future__ import annotations

import argparse
import dataclasses
import textwrap
import types
import typing
from dataclasses import dataclass
from typing import Any, Iterator, Literal

import yaml

WIDTH = 118


@dataclass(frozen=True)
class KeyHelp:
    key: str  # dotted path, as written on the command line
    type: str
    default: str
    help: str


def type_text(tp) -> str:
    """``Literal['a', 'b']`` → ``a|b``; ``int | None`` → ``int or null``; ``list[int]`` → ``list of int``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return "|".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        names = [type_text(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in args else "")
    if origin in (list, tuple):
        return f"list of {type_text(args[0])}" if args else "list"
    if tp is Any:
        return "any"
    if origin is dict or tp is dict:
        return "mapping"
    return getattr(tp, "__name__", str(tp))


def default_text(f: dataclasses.Field) -> str:
    """The field's default as it would be written in YAML."""
    value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000)
    return text.removesuffix("\n...\n").strip()


def field_help(f: dataclasses.Field) -> str:
    return str(f.metadata.get("help", "")).strip()


def walk(cls: type, prefix: str = "", skip: tuple[str, ...] = ()) -> Iterator[tuple[dataclasses.Field, str, Any]]:
    """(field, dotted key, resolved type) of every field of ``cls``, nested dataclasses included (before their
    fields, so they can head a section)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        if key in skip:
            continue
        yield f, key, hints[f.name]
        if dataclasses.is_dataclass(hints[f.name]):
            yield from walk(hints[f.name], f"{key}.", skip)


def keys_of(cls: type, prefix: str = "", skip: tuple[str, ...] = ()) -> list[KeyHelp]:
    """Every leaf key of ``cls`` (nested dataclasses are sections, not keys)."""
    return [KeyHelp(key, type_text(tp), default_text(f), field_help(f))
            for f, key, tp in walk(cls, prefix, skip) if not dataclasses.is_dataclass(tp)]


def format_key(row: KeyHelp) -> str:
    head = f"  {row.key} = {row.default}  ({row.type})"
    body = textwrap.fill(row.help or "(no help declared)", WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return f"{head}\n{body}"


def run_config_help() -> str:
    """Top-level keys first, then one section per nested dataclass (``method.options`` is listed per method)."""
    from harness.config import RunConfig

    hints = typing.get_type_hints(RunConfig)
    fields = dataclasses.fields(RunConfig)
    lines = ["config keys (key.sub=value on the command line, or the same nesting in the profile YAML);",
             "the defaults are the paper protocol:"]
    lines += [format_key(KeyHelp(f.name, type_text(hints[f.name]), default_text(f), field_help(f)))
              for f in fields if not dataclasses.is_dataclass(hints[f.name]) and f.name != "benchmark_options"]
    for f in (f for f in fields if dataclasses.is_dataclass(hints[f.name])):
        lines.append(f"\n{f.name}: {field_help(f)}")
        lines += [format_key(row) for row in keys_of(hints[f.name], f"{f.name}.", skip=("method.options",))]
    return "\n".join(lines + benchmark_sections_help())


def benchmark_sections_help() -> list[str]:
    """One section per registered benchmark, from its own ``Config``."""
    from envs.base import BENCHMARKS, benchmark_config

    lines = []
    for name in BENCHMARKS.available():
        cls = benchmark_config(name)  # the options only: --help needs no benchmark's engine
        lines.append(f"\n{name}: options of benchmark={name} ({cls.__module__}.{cls.__qualname__})")
        lines += [format_key(row) for row in keys_of(cls, f"{name}.")]
    return lines


def method_options_help() -> str:
    """Each registered method's options; a Config that extends another method's lists only what it adds."""
    from harness.core import registry

    owners = {registry.get(name).Config: name for name in registry.available()}
    lines = ["method options (method.<option>=value; an unknown option is an error), per registered method:"]
    for name in registry.available():
        cls = registry.get(name)
        base = next((b for b in cls.Config.__mro__[1:] if b in owners), None)
        inherited = {f.name for f in dataclasses.fields(base)} if base else set()
        extends = f"; the options of {owners[base]}, plus" if base else ""
        lines.append(f"\nmethod={name}  ({cls.__module__}.{cls.__qualname__}, methods/FORMULAS.md{extends}):")
        lines += [format_key(row) for row in keys_of(cls.Config, "method.")
                  if row.key[len("method."):] not in inherited]
    return "\n".join(lines)


def config_help() -> str:
    return f"{run_config_help()}\n\n{method_options_help()}\n"


class HelpWithConfigKeys(argparse.Action):
    """``-h/--help`` that appends the generated key list; built only when asked for, since the method list
    imports every method (and so torch)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.epilog = f"{parser.epilog or ''}\n{config_help()}"
        parser.print_help()
        parser.exit()


def add_config_help(parser: argparse.ArgumentParser) -> None:
    """Replace the parser's ``-h/--help`` with one that also lists every config key (``conflict_handler`` must
    be ``"resolve"``)."""
    parser.add_argument("-h", "--help", action=HelpWithConfigKeys,
                        help="show this help, with every config key, its default and its meaning, and exit")
