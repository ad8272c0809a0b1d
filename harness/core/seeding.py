"""One master seed → every other seed, derived by hashing so that adding a stream never shifts the others."""
from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass

import numpy as np
import torch

STREAMS = ("torch", "env", "sampling", "data")


def derive_seed(master: int, stream: str) -> int:
    digest = hashlib.sha256(f"{master}/{stream}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@dataclass(frozen=True)
class Seeds:
    master: int
    torch: int
    env: int
    sampling: int
    data: int

    @classmethod
    def from_master(cls, master: int) -> "Seeds":
        return cls(master, *(derive_seed(master, s) for s in STREAMS))

    def as_dict(self) -> dict:
        return asdict(self)


def seed_everything(seeds: Seeds) -> None:
    random.seed(seeds.data)
    np.random.seed(seeds.data % (2**32))
    torch.manual_seed(seeds.torch)


def step_seed(base: int, step: int, purpose: str = "") -> int:
    """A per-step seed (e.g. the sampling seed of RL step 12), stable across resume."""
    return derive_seed(base, f"{purpose}@{step}")
