"""The Method base class and the string-keyed registry of credit-assignment methods.

A method is a class with a ``name``, a ``Config`` dataclass holding its paper defaults, the batch columns it
``requires``, the privileged ``teacher`` context it needs scored (None = no teacher pass), and a vectorised
``advantages`` formula. The engine only ever talks to this interface: adding a method never touches it.

Methods are discovered by importing every module of the ``methods`` package; a user's own class is loaded
from a dotted path ``"package.module:ClassName"`` given as the method name in the config.
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Any, Callable, ClassVar, Mapping

from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.typed import build_dataclass

# Privileged contexts the engine knows how to build (harness/engine/teacher.py); a method names one or None.
TEACHER_CONTEXTS = ("skills", "successful_sibling", "hindsight")


class Method:
    """Base class: subclass, set the class attributes, implement :meth:`advantages`."""

    name: ClassVar[str] = ""
    Config: ClassVar[type] = type(None)
    requires: ClassVar[tuple[str, ...]] = ()
    teacher: ClassVar[str | None] = None
    # What the formula promises, checked on every registered method by tests/test_methods_properties.py
    # (methods/FORMULAS.md#properties-every-method-keeps), so that a new method cannot skip the checks:
    # keeps_sign: sign(Ã) = sign(A) on every token and A = 0 rows stay 0 (a multiplicative reweighting of GRPO);
    # grpo_limit: options under which the advantages equal GRPO's bit for bit (None = none; a method that keeps
    # the sign must have one); stress_options: options far from that limit, so the sign check has teeth.
    keeps_sign: ClassVar[bool] = True
    # How tables and figures show the method (paper_figures reads these from the registry, so a new method needs
    # no edit there): display_name ("" = the registry name) and display_order (rows sort by it, then by name).
    display_name: ClassVar[str] = ""
    display_order: ClassVar[int] = 1000
    grpo_limit: ClassVar[Mapping[str, Any] | None] = None
    stress_options: ClassVar[Mapping[str, Any]] = {}
    min_group_size: ClassVar[int] = 1

    def __init__(self, config: Any = None):
        self.config = config if config is not None else self.Config()

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        """Return (advantages of shape (rows, response_len), diagnostics)."""
        raise NotImplementedError

    def aux_loss(self, batch: StepBatch, logp: Tensor, step: int = 0) -> tuple[Tensor, dict[str, float]] | None:
        """An extra loss term on the student log-probs ``logp`` (rows, response_len); None = no term."""
        return None

    def check_batch(self, batch: StepBatch) -> None:
        batch.require(self.requires, who=f"method {self.name!r}")


_REGISTRY: dict[str, type[Method]] = {}
_DISCOVERED = False


class UnknownMethodError(KeyError):
    def __str__(self) -> str:
        return self.args[0]


def register(name: str) -> Callable[[type[Method]], type[Method]]:
    """Class decorator: ``@register("sharpo")``. A second class under the same name is an error."""

    def wrap(cls: type[Method]) -> type[Method]:
        existing = _REGISTRY.get(name)
        # the same class re-imported (e.g. a module reloaded) may register again; another class may not
        same = existing is not None and (existing.__module__, existing.__qualname__) == (cls.__module__, cls.__qualname__)
        if existing is not None and not same:
            raise ValueError(
                f"method name {name!r} is registered twice: {existing.__module__}.{existing.__qualname__} "
                f"and {cls.__module__}.{cls.__qualname__}; rename one of them"
            )
        if cls.teacher is not None and cls.teacher not in TEACHER_CONTEXTS:
            raise ValueError(f"method {name!r}: teacher={cls.teacher!r} is not one of {TEACHER_CONTEXTS} or None")
        if not dataclasses.is_dataclass(cls.Config):
            raise TypeError(f"method {name!r}: Config must be a dataclass, got {cls.Config!r}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return wrap


def discover() -> None:
    """Import every module in the ``methods`` package so their ``@register`` decorators run."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    import methods

    for info in pkgutil.iter_modules(methods.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"methods.{info.name}")
    _DISCOVERED = True


def available() -> list[str]:
    discover()
    return sorted(_REGISTRY)


def get(name: str) -> type[Method]:
    """Look a method class up by registry name or by dotted path ``"pkg.module:Class"``."""
    if ":" in name:
        return _load_dotted(name)
    discover()
    if name not in _REGISTRY:
        raise UnknownMethodError(
            f"unknown method {name!r}; registered methods: {', '.join(available())}. "
            "A method of your own can be named by its dotted path, e.g. 'mypkg.mymethod:MyMethod'."
        )
    return _REGISTRY[name]


def _load_dotted(path: str) -> type[Method]:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise UnknownMethodError(f"cannot import module {module_name!r} for method {path!r}: {err}") from err
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise UnknownMethodError(f"{path!r} does not name a Method subclass (module {module_name!r}, attribute {attr!r})")
    if not vars(cls).get("name"):  # not registered itself (a subclass inherits its parent's name)
        register(attr.lower())(cls)
    return cls


def build(name: str, options: Mapping[str, Any] | None = None) -> Method:
    """Instantiate a method with its Config built from ``options`` (unknown keys are an error)."""
    cls = get(name)
    config = build_dataclass(cls.Config, dict(options or {}), where=f"method ({cls.name or name})")
    return cls(config)
