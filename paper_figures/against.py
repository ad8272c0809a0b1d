"""``python -m paper_figures --against docs/results/cpu``: does a grid agree with the published one, per method?

The published folder holds ``runs.csv`` (final success of every published run, as ``tables/runs.csv`` is written)
and ``published.json`` (the commit, the profile and the resolved settings the published runs were made with).

Which differences are expected:

- Same code, same settings, same kind of machine and libraries: every run is seeded and the CPU profile runs one
  thread a job, so the per-seed numbers are identical, bit for bit.
- Another machine (another CPU, BLAS or oneDNN kernels, torch build): float rounding differs in the last bits,
  the first sampled token that flips sends a run down another path, and the per-seed numbers differ. Only the
  statistics must agree: a method agrees when the interval of its mean's difference (Welch's t over the seeds of
  both grids) contains 0. The intervals are Bonferroni-adjusted over the k methods compared (each at 1 − 0.05/k), so
  a grid that reproduces has at most a 5% chance of showing any DIFFERS, not 5% per method.
- Other settings (a changed profile): not comparable; the differing keys are named.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from paper_figures import render, stats

IDENTICAL, AGREES, DIFFERS, NOT_COMPARABLE, TOO_FEW = (
    "identical", "agrees", "DIFFERS", "not comparable", "too few seeds")
EXPLAIN = {
    IDENTICAL: "every seed you ran ends at the published seed's success (to 1e-3 points): the runs took the same "
               "paths (same code and settings; another instruction set may change only the last float digits). "
               "Run on some of the published seeds, the published mean shown is over those seeds",
    AGREES: "the seeds differ but the means agree within the interval of their difference: a statistical "
            "reproduction, as expected on another machine (float rounding sends runs down other paths)",
    DIFFERS: "the means differ beyond the interval of their difference: not explained by seed-to-seed spread",
    NOT_COMPARABLE: "the runs were made with other settings than the published ones",
    TOO_FEW: "fewer than 2 seeds on one side: no interval to judge by",
}
# where files go and how often, and which profile asked for a run: not the numbers (harness.records.protocol)
IGNORED_KEYS = ("model.cache_dir", "train.checkpoint_every", "profile")
# Same paths on another instruction set still sum the exact success's float32 terms in another order: the AVX2
# grid of all 35 published runs differs by at most 5.1e-7 (docs/reproduce.md). The closest runs that took another
# path were 7e-4 apart (0.07 points, GRPO seeds 1 and 4 under AVX2 at 02ff7c6).
SAME_PATH_TOLERANCE = 1e-5


def read_published(folder: str | Path) -> tuple[pd.DataFrame, dict]:
    """(runs.csv, published.json) of a published folder; FileNotFoundError naming what is missing."""
    folder = Path(folder)
    runs_csv = next((p for p in (folder / "runs.csv", folder / "tables" / "runs.csv") if p.exists()), None)
    if runs_csv is None:
        raise FileNotFoundError(f"{folder}: no runs.csv (python -m paper_figures writes it as tables/runs.csv)")
    info_path = folder / "published.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    return pd.read_csv(runs_csv), info


def _flatten(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def setting_differences(run_config: dict, info: dict, label: str) -> list[str]:
    """Keys set differently in a run's resolved config than in the published one (keys only one side has are
    skipped: a setting added since cannot be compared); the published per-label overrides apply first."""
    published = _flatten(info.get("config") or {})
    published.update((info.get("overrides") or {}).get(label, {}))
    ours = _flatten(run_config)
    return [f"{key}: {ours[key]!r} (published {value!r})" for key, value in sorted(published.items())
            if key in ours and key not in IGNORED_KEYS and ours[key] != value]


def run_settings(runs: pd.DataFrame, info: dict) -> dict[tuple[str, str], list[str]]:
    """(benchmark, method) → the setting differences of its runs, read from each run's protocol.json."""
    out: dict[tuple[str, str], list[str]] = {}
    if not info.get("config") or "run_dir" not in runs.columns:
        return out
    for run in runs.itertuples(index=False):
        path = Path(run.run_dir) / "protocol.json"
        config = json.loads(path.read_text()).get("config") if path.exists() else None
        if config:
            found = out.setdefault((run.benchmark, run.method), [])
            found += [d for d in setting_differences(config, info, run.method) if d not in found]
    return out


def welch_interval(x: np.ndarray, y: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean(x) − mean(y), low, high): Welch's t interval of a difference of means of independent samples."""
    diff = float(x.mean() - y.mean())
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se = math.sqrt(vx + vy)
    if se == 0:
        return diff, diff, diff
    dof = (vx + vy) ** 2 / (vx ** 2 / (x.size - 1) + vy ** 2 / (y.size - 1))
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, dof) * se)
    return diff, diff - half, diff + half


def _verdict(ours: pd.Series, theirs: pd.Series, differences: list[str], confidence: float) -> tuple[str, tuple]:
    x, y = ours.to_numpy(dtype=float), theirs.to_numpy(dtype=float)
    if differences:
        return NOT_COMPARABLE, (np.nan,) * 3
    if _same_paths(ours, theirs):
        return IDENTICAL, (0.0, 0.0, 0.0)
    if x.size < 2 or y.size < 2:
        return TOO_FEW, (float(x.mean() - y.mean()) if x.size and y.size else np.nan, np.nan, np.nan)
    diff = welch_interval(x, y, confidence)
    return (AGREES if diff[1] <= 0 <= diff[2] else DIFFERS), diff


def _same_paths(ours: pd.Series, theirs: pd.Series) -> bool:
    """Every seed of ours is a published seed and ends at its success, to float rounding (a subset of the published
    seeds counts: a check of two seeds need not rerun all five)."""
    if ours.empty or not ours.index.isin(theirs.index).all():
        return False
    gap = (ours - theirs.reindex(ours.index)).abs()
    return bool((gap <= SAME_PATH_TOLERANCE).all())


def family_confidence(k: int, overall: float = 0.95) -> float:
    """Bonferroni: each of k intervals at 1 − (1 − overall)/k, so all k hold together with at least ``overall``."""
    return stats.bonferroni_confidence(k, overall)


def compare(ours: pd.DataFrame, published: pd.DataFrame, settings: dict | None = None,
            overall: float = 0.95) -> pd.DataFrame:
    """One row per (benchmark, method) of the published grid: both means (success %), the difference with its
    interval (Bonferroni-adjusted over the methods: ``family_confidence``), and the verdict. ``ours`` and
    ``published`` hold benchmark, method, seed, success (0–1)."""
    rows = []
    groups = published.groupby(["benchmark", "method"], sort=False)
    confidence = family_confidence(groups.ngroups, overall)
    for (bench, method), theirs in groups:
        mine = ours[(ours["benchmark"] == bench) & (ours["method"] == method)]
        differences = (settings or {}).get((bench, method), [])
        row = {"benchmark": bench, "method": method, "seeds_ours": len(mine), "seeds_published": len(theirs),
               "success_ours": mine["success"].mean() * 100, "success_published": theirs["success"].mean() * 100}
        if mine.empty:
            row.update(verdict="missing", diff=np.nan, diff_low=np.nan, diff_high=np.nan, settings="")
        else:
            verdict, diff = _verdict(mine.set_index("seed")["success"].sort_index(),
                                     theirs.set_index("seed")["success"].sort_index(), differences, confidence)
            row.update(verdict=verdict, diff=diff[0] * 100, diff_low=diff[1] * 100, diff_high=diff[2] * 100,
                       settings="; ".join(differences))
            if verdict == IDENTICAL:  # a subset of the published seeds: its means side by side, not 2 against 5
                row["success_published"] = theirs[theirs["seed"].isin(mine["seed"])]["success"].mean() * 100
        row["confidence"] = confidence
        rows.append(row)
    return pd.DataFrame(rows)


def report(table: pd.DataFrame, info: dict, commits: list[str]) -> str:
    """The per-method verdict as text, with what each verdict means."""
    lines = [f"published: {info.get('commit', 'unknown commit')} ({info.get('profile', 'profile unknown')}); "
             f"yours: {', '.join(commits) or 'commit unknown'}",
             f"method             yours (seeds)   published (seeds)   difference [{_level(table)} interval]  verdict"]
    for row in table.itertuples(index=False):
        interval = (f"{row.diff:+.1f} [{row.diff_low:+.1f}, {row.diff_high:+.1f}]" if np.isfinite(row.diff_low)
                    else render.MISSING)
        ours, theirs = (render.fmt_pm(v, None, scale=1.0) for v in (row.success_ours, row.success_published))
        lines.append(f"{render.method_name(row.method):18} {ours:>6} ({row.seeds_ours})"
                     f"      {theirs:>6} ({row.seeds_published})        {interval:27} {row.verdict}")
        if row.settings:
            lines.append(f"    settings: {row.settings}")
    lines.append(f"intervals: Welch's t over both grids' seeds, each at {_level(table)} so that all "
                 f"{len(table)} hold together at 95% (Bonferroni)")
    lines.append("")
    lines += [f"{verdict}: {text}" for verdict, text in EXPLAIN.items() if verdict in set(table["verdict"])]
    if "missing" in set(table["verdict"]):
        lines.append("missing: no finished run of this method in your grid")
    return "\n".join(lines)


def _level(table: pd.DataFrame) -> str:
    return f"{table['confidence'].iloc[0]:.1%}" if len(table) else "95%"


def against(runs: pd.DataFrame, folder: str | Path) -> tuple[pd.DataFrame, str]:
    """Compare finished runs (``load_runs(...).runs``) with a published folder; (table, printed report)."""
    published, info = read_published(folder)
    table = compare(runs, published, run_settings(runs, info))
    protocols = [_protocol(Path(d)) for d in runs.get("run_dir", [])]
    commits = sorted({p["git_commit"][:7] for p in protocols if isinstance(p.get("git_commit"), str)})
    text = report(table, info, commits)
    extra = sorted(set(zip(runs["benchmark"], runs["method"])) - set(zip(published["benchmark"], published["method"])))
    if extra:
        text += "\nnot in the published grid (not compared): " + ", ".join(
            f"{render.method_name(m)} ({render.benchmark_name(b)})" for b, m in extra)
    versions = version_differences(protocols, info.get("versions") or {})
    if versions:
        text += ("\nyour environment differs from the published one (" + "; ".join(versions) + "): expect a "
                 "statistical match at best, not identical numbers")
    return table, text


def version_differences(protocols: list[dict], published: dict) -> list[str]:
    """Package versions (from the runs' protocol.json) that differ from the published environment's."""
    seen: dict[str, set] = {}
    for protocol in protocols:
        for package, version in (protocol.get("versions") or {}).items():
            seen.setdefault(package, set()).add(version)
    return [f"{package} {', '.join(map(str, sorted(seen[package], key=str)))} (published {version})"
            for package, version in sorted(published.items()) if package in seen and seen[package] != {version}]


def _protocol(run_dir: Path) -> dict:
    path = run_dir / "protocol.json"
    return json.loads(path.read_text()) if path.exists() else {}


def failed(table: pd.DataFrame) -> bool:
    return bool(table["verdict"].isin([DIFFERS, NOT_COMPARABLE, "missing"]).any())
