"""Gates: procedurally generated corridors of routine halls and a few pivotal gates (a credit-assignment test).

``make_benchmark("gates", GatesConfig(...))`` builds :class:`GatesBenchmark`; ``python -m envs.gates`` prints a
sample task and the success rates of the expert and of a random policy.
"""
from envs.gates.benchmark import GatesBenchmark
from envs.gates.config import GatesConfig

__all__ = ["GatesBenchmark", "GatesConfig"]
