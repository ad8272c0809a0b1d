"""ALFWorld on the ``alfworld`` package's own engine: official json_2.1.1 games when present, generated games
offline (see README.md).

Importing the package imports only its options (config.py): the engine (textworld, alfworld) is registered lazily
and loads when a run asks for the benchmark, so a config of another benchmark loads without those packages.
"""
from envs.alfworld.config import AlfworldConfig
from envs.base import BENCHMARK_CONFIGS, BENCHMARKS

BENCHMARKS.add("alfworld", "envs.alfworld.benchmark:AlfworldBenchmark")
BENCHMARK_CONFIGS.add("alfworld", AlfworldConfig)

__all__ = ["AlfworldBenchmark", "AlfworldConfig"]


def __getattr__(name: str):
    if name == "AlfworldBenchmark":  # `from envs.alfworld import AlfworldBenchmark` imports the engine then
        return BENCHMARKS.get("alfworld")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
