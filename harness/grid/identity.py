"""Runs made under another protocol than the profile's: found, named, and kept out of the tables.

A run of the grid counts for the profile only when the config identity in its ``protocol.json`` (resolved config
and method options, ``harness.records.protocol.config_hash``) is the one the profile gives that run today; a run made
before the profile changed (e.g. 3 steps where the profile now says 5) is *stale*: it is listed in
``tables/stale_runs.csv`` with the keys that differ, left out of every table, and its cell counts as missing.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd

from harness.records.identity import config_record, differences, read_protocol
from harness.records.protocol import config_hash

STALE_COLUMNS = ["benchmark", "method", "seed", "run_dir", "differs"]


def expected_records(profile: str, config_dir: str | Path = "config") -> dict[tuple, dict]:
    """(benchmark, label, seed) → the config record the profile gives that run (no benchmark is built)."""
    import json

    from harness.config import load_config
    from harness.grid.runs import load_grid

    grid = load_grid(profile, config_dir)
    records = {}
    for run in grid.runs:
        cfg = load_config(grid.profile_path, run.override_items())
        records[(run.benchmark, run.label, run.seed)] = json.loads(json.dumps(config_record(cfg), default=str))
    return records


def grid_identities(grid) -> dict[str, str]:
    """Run key (``<benchmark>/<label>/seed<seed>``) → the config identity the profile gives that run."""
    from harness.config import load_config
    from harness.records.identity import config_identity

    return {run.key: config_identity(load_config(grid.profile_path, run.override_items())) for run in grid.runs}


def find_stale(runs: pd.DataFrame, expected: dict[tuple, dict]) -> pd.DataFrame:
    """The finished runs of the grid whose protocol is not the profile's; a run without a readable protocol
    record cannot be checked and is kept, with a warning."""
    rows = []
    for run in runs.itertuples(index=False):
        want = expected.get((run.benchmark, run.method, int(run.seed)))
        if want is None:
            continue
        record = read_protocol(Path(run.run_dir) / "protocol.json")
        if record is None:
            warnings.warn(f"{run.run_dir}: no readable protocol.json with a resolved config; cannot check that it "
                          f"was made under this profile", stacklevel=2)
            continue
        if config_hash(record) != config_hash(want):
            rows.append({"benchmark": run.benchmark, "method": run.method, "seed": int(run.seed),
                         "run_dir": run.run_dir, "differs": "; ".join(_config_differences(record, want))})
    return pd.DataFrame(rows, columns=STALE_COLUMNS)


def _config_differences(record: dict, want: dict) -> list[str]:
    """Only what the config decides: package versions and panel hashes are not the profile's business."""
    keep = ("config", "method")
    return differences({k: record.get(k) for k in keep}, {k: want.get(k) for k in keep}) or ["the config hash"]


def warn_stale(stale: pd.DataFrame) -> None:
    if stale.empty:
        return
    lines = [f"{r.run_dir} ({r.differs})" for r in stale.itertuples(index=False)]
    warnings.warn(f"{len(stale)} finished run(s) were made under another protocol than the profile's and are left "
                  f"out of the tables (tables/stale_runs.csv): " + "; ".join(lines)
                  + ". Re-run them: `snakemake` does (rerun-triggers params), "
                    "or `python -m harness train ... --force`.",
                  stacklevel=2)
