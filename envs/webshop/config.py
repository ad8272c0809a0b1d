"""WebShop benchmark options (the ``webshop:`` section of a run config)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WebshopConfig:
    url: str | None = None  # a running WebShop text server; None = the offline catalogue shipped here
    max_steps: int = 15
    train_panel_size: int | None = None  # None = profile default
    eval_panel_size: int | None = None  # None = profile default (paper: 500 goals)
    request_timeout_s: float = 10.0
