"""GRPO + OPSD: naive on-policy self-distillation, i.e. SDAR with β = 0 (methods/FORMULAS.md#grpoopsd)."""
from __future__ import annotations

from harness.core.registry import register
from methods.sdar import GatedDistillation, GrpoOpsdConfig


@register("grpo_opsd")
class GrpoOpsd(GatedDistillation):
    """Naive GRPO + on-policy self-distillation: SDAR with β = 0, i.e. a constant gate of 0.5."""

    Config = GrpoOpsdConfig
    display_name = "GRPO+OPSD"
    display_order = 30

    @property
    def gate_beta(self) -> float:
        return 0.0
