"""A small synthetic ALFWorld-like corpus and a tiny model built from it, for model and backend tests.

Import as ``from tiny_corpus import ...`` (pytest puts tests/ on sys.path). Independent of the real benchmarks.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from harness.policy.models import load_policy
from harness.policy.tiny_model import build_tiny_model

OBJECTS = ["apple 1", "mug 2", "knife 1", "towel 3", "book 1", "desklamp 1", "cabinet 4", "drawer 2",
           "countertop 1", "fridge 1", "microwave 1", "sinkbasin 1"]
VERBS = ["go to", "take", "put", "open", "close", "heat", "cool", "clean", "examine", "use"]
SHAPE = dict(tiny_hidden=32, tiny_layers=1, tiny_heads=2, tiny_vocab=400)


def observation(rng: random.Random, sentences: int) -> str:
    return " ".join(f"On the {rng.choice(OBJECTS)}, you see a {rng.choice(OBJECTS)}." for _ in range(sentences))


def prompt(rng: random.Random, sentences: int = 8) -> str:
    actions = ", ".join(f"'{rng.choice(VERBS)} {rng.choice(OBJECTS)}'" for _ in range(6))
    return (f"Your task is to: put a {rng.choice(OBJECTS)} in {rng.choice(OBJECTS)}.\n"
            f"Observation: {observation(rng, sentences)}\nYour admissible actions are: [{actions}]")


def response(rng: random.Random) -> str:
    return f"<action>{rng.choice(VERBS)} {rng.choice(OBJECTS)}</action>"


def corpus(n: int = 200, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [text for _ in range(n) for text in (prompt(rng), response(rng))]


def tiny_config(**shape):
    # imported here: the vLLM test venv installs the project without its dependencies (harness.config pulls in
    # the benchmarks' packages); build_tiny_model only reads the tiny_* fields
    try:
        from harness.config_sections import ModelConfig
    except ImportError:
        from types import SimpleNamespace as ModelConfig
    return ModelConfig(dtype="float32", **{**SHAPE, **shape})


def build_and_load(folder: Path, seed: int = 0, **shape):
    path = build_tiny_model(tiny_config(**shape), corpus(), folder, seed=seed)
    return load_policy(path, "float32", "cpu")


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny models gain nothing from a second thread, and OpenMP threads spin badly on a busy 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
