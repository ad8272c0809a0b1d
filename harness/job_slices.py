"""Job slices: a run longer than the cluster lets one job run, as a chain of jobs that each resume it.

A partition's time limit (often 24-72 h) is shorter than some runs (``paper_lora``: ~135 h estimated). With
``grid.slice_min`` set (or ``snakemake --config slice_min=N``, the partition's limit), a train job asks for
``slice_min`` minutes, not ``runtime_min``; at the end of its slice SLURM sends SIGTERM, the trainer saves a
checkpoint at the step it reached and exits ``EXIT_REQUEUE`` (docs/recovery.md), the job counts as failed, and
Snakemake submits it again with ``--resume``: the next slice continues the run. The train rule's ``retries`` is
the number of slices after the first plus the workflow's own ``--retries`` (what a profile allows for node
failures), so a run gets every slice it needs and the usual allowance on top.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class JobSlices:
    runtime_min: int  # the run's estimated wall time (grid.runtime_min)
    slice_min: int  # what one job asks the scheduler for

    @property
    def count(self) -> int:
        """Jobs a run needs at most, one after the other."""
        return math.ceil(self.runtime_min / self.slice_min)

    def retries(self, failures: int) -> int:
        """The train rule's ``retries``: every slice after the first, plus ``failures`` (the workflow's --retries)."""
        return self.count - 1 + failures

    def describe(self) -> str:
        if self.count == 1:
            return f"one job of {self.runtime_min} min"
        return f"{self.count} chained jobs of {self.slice_min} min for a run of ~{self.runtime_min} min"


def grid_section(profile_path: str | Path):
    """The ``grid:`` section of a profile (with the profiles it extends), checked: a GridConfig."""
    from harness.config_sections import GridConfig
    from harness.core.typed import ConfigError, build_dataclass
    from harness.validation import read_profile

    try:
        return build_dataclass(GridConfig, read_profile(Path(profile_path)).get("grid") or {}, where="grid")
    except ConfigError as err:
        raise ConfigError(f"{profile_path}: {err}") from None


def job_slices(profile_path: str | Path, slice_min: int | str | None = None) -> JobSlices:
    """The slices of a profile's runs; ``slice_min`` (Snakemake's ``--config slice_min=N``) overrides the
    profile's ``grid.slice_min``. No slice length: one job of ``runtime_min``."""
    from harness.core.typed import ConfigError

    grid = grid_section(profile_path)
    chosen = grid.slice_min if slice_min is None else slice_min
    if chosen is None:
        return JobSlices(grid.runtime_min, grid.runtime_min)
    try:
        minutes = int(chosen)
    except ValueError:
        minutes = 0
    if minutes < 1:
        raise ConfigError(f"slice_min={chosen!r}: a job's length in whole minutes >= 1 is needed (your partition's "
                          f"time limit, `sinfo -o '%P %l'`), e.g. --config slice_min=2880")
    return JobSlices(grid.runtime_min, min(minutes, grid.runtime_min))
