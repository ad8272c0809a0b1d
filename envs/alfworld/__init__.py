"""ALFWorld on the ``alfworld`` package's own engine: official json_2.1.1 games when present, generated games
offline (see README.md)."""
from envs.alfworld.benchmark import AlfworldBenchmark
from envs.alfworld.config import AlfworldConfig

__all__ = ["AlfworldBenchmark", "AlfworldConfig"]
