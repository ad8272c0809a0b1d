"""The Method base class and the string-keyed registry of credit-assignment methods.

A method is a class with a ``name``, a ``Config`` dataclass holding its paper defaults, the batch columns it
``requires``, the privileged ``teacher`` context it needs scored (None = no teacher pass), and a vectorised
``advantages`` formula. The engine only ever talks to this interface: adding a method never touches it.

Methods live in ``METHODS`` (a :class:`harness.core.plugins.Registry`), filled by importing every module of the
``methods`` package; a user's own class is loaded from a dotted path ``"package.module:ClassName"`` given as the
method name in the config.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, ClassVar, Mapping

from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.plugins import Registry, UnknownPluginError
from harness.core.ranges import Checked
from harness.core.typed import build_dataclass

# Privileged contexts the engine can build: name -> builder(trajectories, benchmark) -> one context (or None) per
# row. harness/teacher_contexts.py registers its three; a method's ``teacher`` names one, or None for no teacher.
# Like METHODS, filled on a first lookup by the importer harness/plugins.py installs: this layer names no plug-in.
TEACHER_CONTEXTS: Registry[Callable] = Registry("teacher context")


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
    # "" for a method; "positive" for a control arm that knows the answer (an oracle reading ground-truth labels):
    # tables list controls apart from the methods and never rank them
    control: ClassVar[str] = ""
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


class UnknownMethodError(UnknownPluginError):
    """An unknown method name or a dotted path that names no Method class."""


def _check_method(name: str, cls: type[Method]) -> None:
    if cls.teacher is not None and cls.teacher not in TEACHER_CONTEXTS:
        raise ValueError(f"method {name!r}: teacher={cls.teacher!r} is not one of "
                         f"{TEACHER_CONTEXTS.available()} or None")
    if not (dataclasses.is_dataclass(cls.Config) and issubclass(cls.Config, Checked)):
        raise TypeError(f"method {name!r}: Config must be a dataclass deriving from harness.core.ranges.Checked "
                        f"(its ranges are checked when it is built), got {cls.Config!r}")
    cls.name = name


METHODS: Registry[type[Method]] = Registry(
    "method", check=_check_method,
    hint="A method of your own can be named by its dotted path, e.g. 'mypkg.mymethod:MyMethod'")
register = METHODS.register  # the decorator a method module uses: @register("sharpo")


def available() -> list[str]:
    return METHODS.available()


def get(name: str) -> type[Method]:
    """Look a method class up by registry name or by dotted path ``"pkg.module:Class"``."""
    if ":" in name:
        return _load_dotted(name)
    try:
        return METHODS.get(name)
    except UnknownPluginError as err:
        raise UnknownMethodError(str(err)) from None


def _load_dotted(path: str) -> type[Method]:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise UnknownMethodError(f"cannot import module {module_name!r} for method {path!r}: {err}") from err
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise UnknownMethodError(f"{path!r} does not name a Method subclass "
                                 f"(module {module_name!r}, attribute {attr!r})")
    if not vars(cls).get("name"):  # not registered itself (a subclass inherits its parent's name)
        register(attr.lower())(cls)
    return cls


def build(name: str, options: Mapping[str, Any] | None = None, config: Any = None) -> Method:
    """Instantiate a method with its Config: ``config`` as built when the run config loaded
    (``cfg.method.config``), or built here from ``options`` (unknown keys are an error)."""
    cls = get(name)
    if config is None:
        config = build_dataclass(cls.Config, dict(options or {}), where=f"method ({cls.name or name})")
    elif not isinstance(config, cls.Config):
        raise TypeError(f"method {name!r} takes a {cls.Config.__name__}, not a {type(config).__name__}")
    return cls(config)
