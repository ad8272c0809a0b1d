"""Speed-ups of TextWorld's PDDL text generation; the game text stays byte-identical.

TextWorld's PDDL engine re-parses the same few dozen grammar and condition strings with tatsu on every step
(``textgen._parse_and_convert`` for the feedback grammar, ``logic._parse_and_convert`` for rule conditions);
that parse is ~80% of a step. Both are pure functions of their text. The grammar memo returns a copy because
``ContextSensitiveGrammar.derive`` writes a context onto the symbols it gets back; the logic parses (rules,
propositions, signatures) are only read, so they are shared.

Grammar symbols are copied (the memo's results, ``replace``'s copy of a rule's right-hand side, ``Symbol.copy``)
by ``_clone_symbols``: new symbol objects all the way down that share their strings and context dicts, where
TextWorld ``deepcopy``-s them, contexts included, and a context holds the whole game state (``PddlState``, the
fact list, the entity table). Sharing is equivalent because no grammar code mutates a context dict in place
(``copy_context`` and ``query`` build new ones) and every symbol's context is assigned before it is read. The
deep copies were a third of a step.

``copy_context`` deep-copies the context's ``variables`` (entity records) and ``mapping`` dicts for every
symbol; the derivation only ever adds keys to those dicts (``query`` does ``.update``) and never mutates the
records, so a copy of the dicts (sharing the records) is equivalent and ~50x cheaper.

``fast_downward.pddl2sas`` (PDDL -> SAS translation) runs twice per ``PddlState``, i.e. on every load *and*
every reset: ~7 s for a full-size game. Its output depends only on (domain, problem, optimize); it is kept
in memory and, when a cache folder is set, pickled on disk keyed by the sha256 of the inputs (read back by an
unpickler that builds only the data classes these results are made of, :class:`_CacheUnpickler`: a cache folder on a
shared filesystem is not a trusted input, and a crafted file that names anything else is refused). The wrapper also
restores ``sys.argv``, which ``pddl2sas`` overwrites. A game's ``GameLogic`` (its grammar file parsed by tatsu,
~0.1 s, and different for every game because the grammar holds the task line) is memoised the same way.

``check_flag`` (two debug switches read from ``os.environ`` on every derivation step, ~7% of a step) is read
once, when the fast path is installed.

Observations are unchanged (``tests/test_alfworld_env.py`` replays random actions and walkthroughs with and
without the fast path and compares every text and admissible list).
"""
from __future__ import annotations

import copy
import functools
import hashlib
import io
import os
import pickle
import sys
import tempfile
from collections import OrderedDict
from pathlib import Path

import fast_downward
import textworld.envs.pddl.textgen as _textgen
import textworld.logic as _logic

_ORIGINALS = {"textgen": _textgen._parse_and_convert, "logic": _logic._parse_and_convert,
              "symbol_copy": _textgen.Symbol.copy, "copy_context": _textgen.copy_context,
              "deepcopy": _textgen.deepcopy, "check_flag": _textgen.check_flag, "pddl2sas": fast_downward.pddl2sas}
_NESTED_SYMBOL_FIELDS = ("symbol", "expression")  # ListSymbol.symbol, ConditionalSymbol.expression


def _copy_context(context):
    return {"state": context["state"], "facts": context["facts"], "variables": dict(context["variables"]),
            "mapping": dict(context["mapping"]), "entity_infos": context["entity_infos"]}


def _clone_symbols(value, memo=None):
    """``deepcopy`` for grammar symbols (a symbol or a list of them); anything else goes to ``copy.deepcopy``."""
    if isinstance(value, list) and all(isinstance(v, _textgen.Symbol) for v in value):
        return [_clone_symbol(v) for v in value]
    if isinstance(value, _textgen.Symbol):
        return _clone_symbol(value)
    return copy.deepcopy(value, memo)


def _clone_symbol(symbol):
    clone = object.__new__(type(symbol))
    fields = dict(symbol.__dict__)
    for name in _NESTED_SYMBOL_FIELDS:
        if isinstance(fields.get(name), _textgen.Symbol):
            fields[name] = _clone_symbol(fields[name])
    clone.__dict__ = fields
    return clone


def _symbol_copy(self, context):
    copied = _clone_symbol(self)
    copied.context = _copy_context(context)
    return copied


def _frozen_check_flag():
    flags = {name: _ORIGINALS["check_flag"](name) for name in ("TW_CSG_TRACE", "TW_CSG_DEBUG")}

    def check_flag(flag: str, default: bool = False):
        return flags[flag] if flag in flags else _ORIGINALS["check_flag"](flag, default)

    return check_flag


def _memoised(parse, copies: bool):
    @functools.lru_cache(maxsize=4096)
    def cached(text: str, rule_name: str):
        return parse(text, rule_name=rule_name)

    def parse_and_convert(text, rule_name=None, **kwargs):
        if kwargs.get("trace") or not isinstance(text, str) or rule_name is None:
            return parse(text, rule_name=rule_name, **kwargs)
        result = cached(text, rule_name)
        return _clone_symbols(result) if copies else result

    parse_and_convert.cache_info = cached.cache_info
    return parse_and_convert


# What the cached results are made of (every global the pickles of a full ALFWorld game name): TextWorld's and Fast
# Downward's data classes and plain containers. Classes only, never functions: a pickle can call what it names.
_SAFE_BUILTINS = {("builtins", n) for n in ("list", "dict", "set", "frozenset", "tuple", "str", "int", "float", "bool")}
_SAFE_BUILTINS |= {("collections", "defaultdict"), ("collections", "OrderedDict")}
_SAFE_MODULES = ("textworld.logic", "textworld.envs.pddl.logic", "textworld.envs.pddl.textgen",
                 "fast_downward.translate.pddl.")


class UnsafeCacheError(pickle.UnpicklingError):
    """A cache file names something other than the data classes a cached result is made of."""


class _CacheUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _SAFE_BUILTINS:
            return super().find_class(module, name)
        if any(module == m or (m.endswith(".") and module.startswith(m)) for m in _SAFE_MODULES):
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise UnsafeCacheError(f"{module}.{name}")


def safe_loads(data: bytes):
    """``pickle.loads`` that builds only the allow-listed data classes (raises :class:`UnsafeCacheError`)."""
    return _CacheUnpickler(io.BytesIO(data)).load()


class PickledMemo:
    """Memory LRU + optional on-disk pickles of a pure function's results, read back by :func:`safe_loads`."""

    def __init__(self, kind: str, max_in_memory: int):
        self.kind = kind  # part of every key: two memos may share one folder
        self.folder: Path | None = None
        self.max_in_memory = max_in_memory
        self._memory: OrderedDict[str, object] = OrderedDict()
        self.misses = 0

    def get(self, inputs: tuple[str, ...], compute):
        """``compute()``'s result for these ``inputs`` (the strings it depends on), computed at most once."""
        key = hashlib.sha256("\0".join((self.kind, *inputs)).encode()).hexdigest()
        if key in self._memory:
            self._memory.move_to_end(key)
            return self._memory[key]
        result = self._load(key)
        if result is None:
            self.misses += 1
            result = compute()
            self._store(key, result)
        self._memory[key] = result
        if len(self._memory) > self.max_in_memory:
            self._memory.popitem(last=False)
        return result

    def _path(self, key: str) -> Path | None:
        return None if self.folder is None else self.folder / key[:2] / f"{key}.pkl"

    def _load(self, key: str):
        path = self._path(key)
        if path is None or not path.is_file():
            return None
        try:
            return safe_loads(path.read_bytes())
        except UnsafeCacheError as err:  # not a torn file: something wrote code into the cache
            raise UnsafeCacheError(
                f"{path} is refused: it names {err}, which no cached ALFWorld result holds (a crafted file would run "
                f"code when loaded). Delete the cache folder {self.folder} (it is rebuilt) and check who can write "
                "to it") from None
        except Exception:  # a torn or stale file is recomputed, never fatal
            return None

    def _store(self, key: str, result) -> None:
        path = self._path(key)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)


class TranslationCache(PickledMemo):
    """``pddl2sas`` with its results memoised (a drop-in replacement for ``fast_downward.pddl2sas``)."""

    def __init__(self, max_in_memory: int = 512):  # two per game, ~160 KB each
        super().__init__("pddl2sas", max_in_memory)

    def __call__(self, domain: str, problem: str, verbose: bool = False, optimize: bool = False):
        def translate():
            argv = list(sys.argv)
            try:
                return _ORIGINALS["pddl2sas"](domain, problem, verbose=verbose, optimize=optimize)
            finally:
                sys.argv[:] = argv

        return self.get((str(optimize), domain, problem), translate)


TRANSLATIONS = TranslationCache()
# a game's parsed grammar: ~0.1 s of tatsu parsing per distinct game file, 0.5 ms to unpickle
GAME_LOGIC = PickledMemo("game-logic", max_in_memory=256)  # ~1 MB each
# a game's initial facts (what names its entities): loading a game needs them before reset builds its state
INITIAL_FACTS = PickledMemo("initial-facts", max_in_memory=512)


def install(translation_cache_dir: str | os.PathLike | None = None) -> None:
    """Idempotent; affects this process only. ``translation_cache_dir`` turns on the on-disk SAS cache."""
    if translation_cache_dir is not None:
        TRANSLATIONS.folder = GAME_LOGIC.folder = INITIAL_FACTS.folder = Path(translation_cache_dir)
    fast_downward.pddl2sas = TRANSLATIONS
    if getattr(_textgen._parse_and_convert, "cache_info", None) is None:
        _textgen._parse_and_convert = _memoised(_ORIGINALS["textgen"], copies=True)
    if getattr(_logic._parse_and_convert, "cache_info", None) is None:
        _logic._parse_and_convert = _memoised(_ORIGINALS["logic"], copies=False)
    _textgen.Symbol.copy = _symbol_copy
    _textgen.copy_context = _copy_context
    _textgen.deepcopy = _clone_symbols  # the module's own name for it: ``ContextSensitiveGrammar.replace`` uses it
    _textgen.check_flag = _frozen_check_flag()


def uninstall() -> None:
    _textgen._parse_and_convert = _ORIGINALS["textgen"]
    _logic._parse_and_convert = _ORIGINALS["logic"]
    _textgen.Symbol.copy = _ORIGINALS["symbol_copy"]
    _textgen.copy_context = _ORIGINALS["copy_context"]
    _textgen.deepcopy = _ORIGINALS["deepcopy"]
    _textgen.check_flag = _ORIGINALS["check_flag"]
    fast_downward.pddl2sas = _ORIGINALS["pddl2sas"]
