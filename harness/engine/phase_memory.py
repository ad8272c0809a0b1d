"""GPU memory of each phase of a training step, measured where the memory plan predicts it (CUDA only).

The plan (harness/memory_plan.py) gives one column per phase: generation, scoring (old, reference and teacher
log-probs), backward and the optimizer step. A run on CUDA logs, per phase of every step, the allocator's peak
(``torch.cuda.max_memory_allocated``: what the plan's rows without the reserve count), the caching allocator's peak
(``max_memory_reserved``: the first part of the reserve) and the free memory the driver reports at the phase's end
(``mem_get_info``: what a colocated engine or another process leaves). Backward and the optimizer step alternate
inside the update, so they are measured together as ``update``. On the CPU nothing is logged.
"""
from __future__ import annotations

import torch

GIB = 2**30


class PhaseMemory:
    """``start()`` before a step, ``end(phase)`` after each of its phases: that phase's ``memory/`` metrics."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.step_peak = 0

    def start(self) -> None:
        self.step_peak = 0
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def end(self, phase: str) -> dict[str, float]:
        if not self.cuda:
            return {}
        allocated = torch.cuda.max_memory_allocated(self.device)
        reserved = torch.cuda.max_memory_reserved(self.device)
        free, _ = torch.cuda.mem_get_info(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.step_peak = max(self.step_peak, allocated)
        return {f"memory/{phase}_allocated_gib": allocated / GIB, f"memory/{phase}_reserved_gib": reserved / GIB,
                f"memory/{phase}_free_gib": free / GIB, "memory/peak_gib": self.step_peak / GIB}
