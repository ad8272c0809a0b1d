"""One registry for every kind of plug-in: methods, benchmarks, generation backends, teacher contexts.

``Registry[T]`` maps a name to a plug-in. A plug-in is registered by a decorator (``@METHODS.register("grpo")``)
or as a lazy ``"module:attribute"`` string that is imported only when a run asks for it (so vLLM stays optional).
An unknown name is an :class:`UnknownPluginError` that lists the known names and says how to add one; an import
error inside a plug-in's own module is never swallowed, since it is the message the user needs.
"""
from __future__ import annotations

import importlib
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class UnknownPluginError(KeyError):
    def __str__(self) -> str:
        return self.args[0]


class MissingPackageError(ImportError):
    """A lazily registered plug-in needs a package this machine lacks; the message names it and how to get it."""


class Registry(Generic[T]):
    """Name -> plug-in of one ``kind``.

    ``discover(name)`` is called before a lookup finds nothing (with the name) and before :meth:`available`
    (with None), to import the modules that register themselves; ``check(name, plugin)`` validates a plug-in as
    it is registered; ``hint`` ends the unknown-name error with how to add one."""

    def __init__(self, kind: str, discover: Callable[[str | None], None] | None = None,
                 check: Callable[[str, T], None] | None = None, hint: str = ""):
        self.kind = kind
        self._discover = discover
        self._check = check
        self._hint = hint
        self._entries: dict[str, T | str] = {}
        self._discovered_all = False

    def discover_with(self, discover: Callable[[str | None], None]) -> None:
        """Set how missing names are found (a layer above the registry imports its plug-in packages)."""
        self._discover = discover
        self._discovered_all = False

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@registry.register("name")``. A second, different plug-in under one name is an error
        (the same class re-imported, e.g. a reloaded module, may register again)."""

        def wrap(plugin: T) -> T:
            self.add(name, plugin)
            return plugin

        return wrap

    def add(self, name: str, plugin: T | str) -> None:
        """Register ``plugin``, or a lazy ``"module:attribute"`` string resolved on first :meth:`get`."""
        existing = self._entries.get(name)
        if existing is not None and existing is not plugin and _qualname(existing) != _qualname(plugin):
            raise ValueError(f"{self.kind} name {name!r} is registered twice: {_qualname(existing)} and "
                             f"{_qualname(plugin)}; rename one of them")
        if self._check is not None and not isinstance(plugin, str):
            self._check(name, plugin)
        self._entries[name] = plugin

    def get(self, name: str) -> T:
        if name not in self._entries and self._discover is not None:
            self._discover(name)
        if name not in self._entries:
            known = ", ".join(self.available()) or "none"
            raise UnknownPluginError(f"unknown {self.kind} {name!r}; known: {known}"
                                     + (f". {self._hint}" if self._hint else ""))
        entry = self._entries[name]
        if isinstance(entry, str):
            module, _, attribute = entry.partition(":")
            entry = getattr(self._import(name, module), attribute)
            if self._check is not None:
                self._check(name, entry)
            self._entries[name] = entry
        return entry

    def _import(self, name: str, module: str):
        """Import a lazy plug-in's module; a third-party package it lacks is named (a machine may hold only the
        packages of the plug-ins it runs: a GPU node without textworld still runs Gates)."""
        try:
            return importlib.import_module(module)
        except ModuleNotFoundError as err:
            package = (err.name or "").split(".")[0]
            if not package or module.split(".")[0] == package:
                raise  # the plug-in's own code is broken: its traceback is the message
            raise MissingPackageError(
                f"{self.kind} {name!r} needs the package {package!r}, which is not installed here: install the "
                f"project's dependencies (`pip install -e .`, or `make setup`), or pick another {self.kind}") from err

    def available(self) -> list[str]:
        """Every registered name, sorted (after discovering, once, the plug-ins that register themselves)."""
        if self._discover is not None and not self._discovered_all:
            self._discover(None)
            self._discovered_all = True
        return sorted(self._entries)

    def unregister(self, name: str) -> None:
        """Forget ``name`` (a plug-in registered for a while, e.g. by a test)."""
        self._entries.pop(name, None)

    def __contains__(self, name: str) -> bool:
        if name not in self._entries and self._discover is not None:
            self._discover(name)
        return name in self._entries


def _qualname(plugin) -> str:
    if isinstance(plugin, str):  # "module:attribute", the lazy form of module.attribute
        return plugin.replace(":", ".")
    return f"{getattr(plugin, '__module__', '?')}.{getattr(plugin, '__qualname__', repr(plugin))}"
