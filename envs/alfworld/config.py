"""ALFWorld benchmark options (the ``alfworld:`` section of a run config)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AlfworldConfig:
    # Official json_2.1.1 tree; None = $ALFWORLD_DATA if set, else generated offline games.
    data_path: str | None = None
    source: str = "auto"  # "auto" | "official" | "generated"
    max_steps: int = 50
    invalid_action_penalty: bool = True  # apply the step-row penalty of GRPO's score for invalid actions
    train_panel_size: int | None = None  # None = profile default
    eval_panel_size: int | None = None  # None = profile default (paper: 134 eval-out games)
    cache_dir: str = "results/cache/alfworld"
