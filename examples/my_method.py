"""Clipped GRPO: a complete example method (methods/README.md)."""
from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.ranges import Checked
from harness.core.registry import Method
from methods._segments import to_tokens
from methods.grpo import episode_advantage


@dataclass
class ClippedGrpoConfig(Checked):  # Checked: each range below is checked when the config is built
    section = "method"

    cap: float = field(default=2.0, metadata={"help": "|A| is clipped to this value", "range": "> 0"})
    valid_bonus: float = field(default=0.0, metadata={
        "help": "rows with a valid action get A·(1 + valid_bonus)", "range": ">= 0"})
    invalid_action_penalty: float = field(default=0.1, metadata={"help": "p of GRPO's row score", "range": ">= 0"})


class ClippedGrpo(Method):
    """A_i = clip(GRPO advantage, −cap, cap) · (1 + bonus·valid), broadcast to the response tokens."""

    Config = ClippedGrpoConfig
    requires = ("episode_return", "action_valid", "group_id", "traj_id", "step_idx", "response_mask")
    teacher = None  # no privileged-context pass needed
    grpo_limit = {"cap": 1e9}  # no clipping and no bonus: exactly GRPO (the property tests check it)

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        self.check_batch(batch)  # a missing column fails here, with its name
        c = self.config
        adv = episode_advantage(
            batch, c.invalid_action_penalty, cross_steps=True, norm_by_std=True, epsilon=1e-6
        )
        clipped = adv.clamp(-c.cap, c.cap)
        rows = clipped * (1.0 + c.valid_bonus * batch.action_valid.double())
        diagnostics = {
            "clip_frac": float((clipped != adv).double().mean()),
            "zero_adv_frac": float((rows == 0).double().mean()),
        }
        return to_tokens(rows, batch.response_mask), diagnostics
