"""The stand-in's platform: a GPU one as far as the backend can tell (sleep mode available)."""
from types import SimpleNamespace

current_platform = SimpleNamespace(is_cpu=lambda: False, is_sleep_mode_available=lambda: True)
