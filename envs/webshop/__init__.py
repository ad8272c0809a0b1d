"""WebShop (Yao et al. 2022): offline generated catalogue with WebShop's semantics and reward, or a real site.

``make_benchmark("webshop", WebshopConfig(...), seed, think)`` builds :class:`WebshopBenchmark`. Importing the package
imports only its options (config.py) and the remote client: the engine (bm25s, rapidfuzz, spaCy) is registered lazily
and loads when a run asks for the benchmark, so a config of another benchmark loads without those packages.
"""
from envs.base import BENCHMARK_CONFIGS, BENCHMARKS
from envs.webshop.config import WebshopConfig, WebshopSettings
from envs.webshop.remote import RemoteWebShop, RemoteWebShopError

BENCHMARKS.add("webshop", "envs.webshop.benchmark:WebshopBenchmark")
BENCHMARK_CONFIGS.add("webshop", WebshopConfig)

__all__ = ["WebshopBenchmark", "WebshopConfig", "WebshopSettings", "RemoteWebShop", "RemoteWebShopError"]


def __getattr__(name: str):
    if name == "WebshopBenchmark":  # `from envs.webshop import WebshopBenchmark` imports the engine then
        return BENCHMARKS.get("webshop")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
