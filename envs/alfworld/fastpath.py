"""Four speed-ups of TextWorld's PDDL text generation; the game text stays byte-identical.

TextWorld's PDDL engine re-parses the same few dozen grammar and condition strings with tatsu on every step
(``textgen._parse_and_convert`` for the feedback grammar, ``logic._parse_and_convert`` for rule conditions);
that parse is ~80% of a step. Both are pure functions of their text. The grammar memo returns a deep copy because
``ContextSensitiveGrammar.derive`` writes a context onto the symbols it gets back; the logic parses (rules,
propositions, signatures) are only read, so they are shared. 
``Symbol.copy`` deep-copies a symbol together with its context, and the context holds the whole game state
(``PddlState``, the fact list, the entity table): one step of a full-size game made ~30k deep copies. The
derivation only reads that state, and ``copy_context`` already shares it by reference, so the copy here shares
those three objects too and copies the rest as before.

``copy_context`` deep-copies the context's ``variables`` (entity records) and ``mapping`` dicts for every
symbol; the derivation only ever adds keys to those dicts (``query`` does ``.update``) and never mutates the
records, so a copy of the dicts (sharing the records) is equivalent and ~50x cheaper.

``fast_downward.pddl2sas`` (PDDL -> SAS translation) runs twice per ``PddlState``, i.e. on every load *and*
every reset: ~7 s for a full-size game. Its output depends only on (domain, problem, optimize); it is kept
in memory and, when a cache folder is set, pickled on disk keyed by the sha256 of the inputs. The wrapper also
restores ``sys.argv``, which ``pddl2sas`` overwrites. A game's ``GameLogic`` (its grammar file parsed by tatsu,
~0.1 s, and different for every game because the grammar holds the task line) is memoised the same way.

Observations are unchanged
(``tests/test_alfworld_engine.py`` replays walkthroughs with and without the memo and compares every text).
"""
from __future__ import annotations

import copy
import functools
import hashlib
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
              "pddl2sas": fast_downward.pddl2sas}
_SHARED_CONTEXT_KEYS = ("state", "facts", "entity_infos")


def _copy_context(context):
    return {"state": context["state"], "facts": context["facts"], "variables": dict(context["variables"]),
            "mapping": dict(context["mapping"]), "entity_infos": context["entity_infos"]}


def _symbol_copy(self, context):
    shared = {id(self.context[k]): self.context[k] for k in _SHARED_CONTEXT_KEYS if k in self.context}
    copied = copy.deepcopy(self, shared)
    copied.context = _copy_context(context)
    return copied


def _memoised(parse, copies: bool):
    @functools.lru_cache(maxsize=4096)
    def cached(text: str, rule_name: str):
        return parse(text, rule_name=rule_name)

    def parse_and_convert(text, rule_name=None, **kwargs):
        if kwargs.get("trace") or not isinstance(text, str) or rule_name is None:
            return parse(text, rule_name=rule_name, **kwargs)
        result = cached(text, rule_name)
        return copy.deepcopy(result) if copies else result

    parse_and_convert.cache_info = cached.cache_info
    return parse_and_convert


class PickledMemo:
    """Memory LRU + optional on-disk pickles of a pure function's results (trusted: written by this project)."""

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
            return pickle.loads(path.read_bytes())
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

    def __init__(self, max_in_memory: int = 64):
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
GAME_LOGIC = PickledMemo("game-logic", max_in_memory=256)


def install(translation_cache_dir: str | os.PathLike | None = None) -> None:
    """Idempotent; affects this process only. ``translation_cache_dir`` turns on the on-disk SAS cache."""
    if translation_cache_dir is not None:
        TRANSLATIONS.folder = GAME_LOGIC.folder = Path(translation_cache_dir)
    fast_downward.pddl2sas = TRANSLATIONS
    if getattr(_textgen._parse_and_convert, "cache_info", None) is None:
        _textgen._parse_and_convert = _memoised(_ORIGINALS["textgen"], copies=True)
    if getattr(_logic._parse_and_convert, "cache_info", None) is None:
        _logic._parse_and_convert = _memoised(_ORIGINALS["logic"], copies=False)
    _textgen.Symbol.copy = _symbol_copy
    _textgen.copy_context = _copy_context


def uninstall() -> None:
    _textgen._parse_and_convert = _ORIGINALS["textgen"]
    _logic._parse_and_convert = _ORIGINALS["logic"]
    _textgen.Symbol.copy = _ORIGINALS["symbol_copy"]
    _textgen.copy_context = _ORIGINALS["copy_context"]
    fast_downward.pddl2sas = _ORIGINALS["pddl2sas"]
