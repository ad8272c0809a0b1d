"""Paired statistics on known data: the per-seed difference is the unit, intervals are Bonferroni-adjusted for the
comparisons of a table, P(improvement) counts seeds, and the seed count that resolves a stated gain."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats
from workflow_fixtures.synthetic_runs import write_run

from paper_figures import bootstrap, stats
from paper_figures.build import build

DIFFS = np.array([0.10, 0.30, 0.20, 0.50, 0.40])  # per-seed differences: mean 0.3, s = 0.158


def test_constant_differences_give_a_zero_width_interval_and_certain_improvement():
    result = stats.paired_t([0.05] * 5, m=4)
    assert (result["mean"], result["half"], result["low"], result["high"]) == (0.05, 0.0, 0.05, 0.05)
    assert result["p"] == 0.0 and result["p_adj"] == 0.0
    base = np.array([[0.6], [0.7], [0.8], [0.9], [0.5]])
    rng = np.random.default_rng(0)
    assert bootstrap.paired_probability(base + 0.05, base, 500, rng) == (1.0, 1.0, 1.0)
    assert bootstrap.paired_mean(np.full(5, 0.05), 500, rng) == pytest.approx((0.05, 0.05, 0.05))


def test_bonferroni_t_interval_against_scipy():
    for m in (1, 4, 10):
        result = stats.paired_t(DIFFS, m=m)
        confidence = 1 - 0.05 / m
        low, high = scipy_stats.ttest_1samp(DIFFS, 0.0).confidence_interval(confidence)
        assert result["confidence"] == pytest.approx(confidence)
        assert (result["low"], result["high"]) == pytest.approx((low, high), rel=1e-12)
        # by hand: t_{1 - 0.05/(2m), n-1} · s / √n
        half = scipy_stats.t.ppf(1 - 0.025 / m, 4) * DIFFS.std(ddof=1) / math.sqrt(5)
        assert result["half"] == pytest.approx(half, rel=1e-12)
        assert result["p_adj"] == pytest.approx(min(1.0, m * scipy_stats.ttest_1samp(DIFFS, 0.0).pvalue))
    assert stats.paired_t(DIFFS, m=10)["half"] > stats.paired_t(DIFFS, m=1)["half"] == stats.paired_t(DIFFS)["half95"]


def test_paired_probability_counts_seeds_and_ties():
    x = np.array([[0.5], [0.6], [0.7], [0.8]])
    y = np.array([[0.4], [0.6], [0.8], [0.7]])
    point, low, high = bootstrap.paired_probability(x, y, 2000, np.random.default_rng(1))
    assert point == pytest.approx((1 + 0.5 + 0 + 1) / 4) and low < point < high  # win, tie, loss, win
    # two task types: a seed that wins one type and ties the other counts ¾
    assert bootstrap.wins(np.array([[1.0, 0.5]]), np.array([[0.0, 0.5]])) == pytest.approx([0.75])


def test_paired_bootstrap_resamples_one_set_of_seed_indices():
    """A large seed spread shared by both arms cancels: the paired interval of a +2-point gain on every seed,
    give or take 1, stays near ±1 although the seeds range over 50 points."""
    base = np.array([0.30, 0.80, 0.45, 0.65, 0.55, 0.40])
    diffs = np.array([0.02, 0.03, 0.01, 0.02, 0.03, 0.01])
    point, low, high = bootstrap.paired_mean((base + diffs) - base, 2000, np.random.default_rng(2))
    assert point == pytest.approx(0.02) and 0.0 < low < 0.02 < high < 0.04


def test_seeds_needed_normal_by_hand_and_exact_against_statsmodels():
    # 3-point gain at a paired SD of 4, one comparison: ((1.959964 + 0.841621) · 4/3)² = 13.95 → 14
    assert stats.seeds_needed_normal(0.03, 0.04) == 14
    assert stats.seeds_needed(0.03, 0.04) == 16  # the SD is estimated: t quantiles need two seeds more
    power = pytest.importorskip("statsmodels.stats.power")
    for gain, sd, m in [(0.03, 0.04, 1), (0.03, 0.04, 10), (0.05, 0.06, 7), (0.10, 0.03, 3)]:
        n = power.TTestPower().solve_power(effect_size=gain / sd, alpha=0.05 / m, power=0.8,
                                           alternative="two-sided")
        assert stats.seeds_needed(gain, sd, m) == max(2, math.ceil(n))
    assert stats.seeds_needed(0.03, 0.04, m=10) > stats.seeds_needed(0.03, 0.04, m=1)
    assert stats.seeds_needed(0.03, 0.0) == 2
    with pytest.raises(ValueError, match="gain > 0"):
        stats.seeds_needed(0.0, 0.04)


def outcomes(successes: int, n_tasks: int = 20) -> np.ndarray:
    return np.array([1] * successes + [0] * (n_tasks - successes))


GRPO = [10, 12, 9, 11, 13]  # successes of 20 per seed
ARMS = {"grpo": [0] * 5, "sharpo": [1, 2, 3, 2, 2], "oracle_fatal": [3, 4, 5, 4, 4], "frozen": [-5, -6, -4, -5, -5],
        "grpo_compute_matched": [2, 0, 1, 3, 1], "oracle_decisive": [1, -1, 1, -1, 0]}


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """Gates, 5 seeds: each arm's successes are GRPO's of the same seed plus a known difference."""
    root = tmp_path_factory.mktemp("paired")
    for arm, diffs in ARMS.items():
        for seed in range(5):
            write_run(root / "runs", "gates", arm, seed, 0.5, outcomes=outcomes(GRPO[seed] + diffs[seed]),
                      n_tasks=20)
    build(root / "runs", root / "out", reps=400, figures=False)
    return root / "out" / "tables"


def test_gain_table_is_paired_adjusted_and_lists_controls_apart(grid):
    tidy = pd.read_csv(grid / "gain_over_grpo.csv").set_index("method")
    assert list(tidy.index) == ["sharpo", "grpo_compute_matched", "oracle_fatal", "oracle_decisive", "frozen"]
    assert list(tidy["role"]) == ["method", "compute control", "positive control", "positive control",
                                  "negative control"]
    m = 5  # every arm compared with GRPO, controls included
    sharpo = stats.paired_t(np.array(ARMS["sharpo"]) / 20, m)
    assert tidy.loc["sharpo", "m"] == m and tidy.loc["sharpo", "confidence"] == pytest.approx(0.99)
    assert tidy.loc["sharpo", "gain_pct"] == pytest.approx(10.0)
    assert tidy.loc["sharpo", "ci_half_pct"] == pytest.approx(sharpo["half"] * 100)
    assert tidy.loc["sharpo", "prob_improvement"] == 1.0 and tidy.loc["sharpo", "prob_low"] == 1.0
    assert tidy.loc["grpo_compute_matched", "prob_improvement"] == pytest.approx(0.9)  # 4 wins, 1 tie
    assert tidy.loc["frozen", "prob_improvement"] == 0.0 and tidy.loc["frozen", "excludes_zero"]  # below 0
    markdown = (grid / "gain_over_grpo.md").read_text()
    assert "Bonferroni" in markdown and "m = 5 (1 methods, 4 controls), each interval at 99.00%" in markdown
    assert "| Frozen (lr 0; negative control) |" in markdown and "(compute control)" in markdown
    rliable = pd.read_csv(grid / "rliable_gates.csv").set_index("method")
    assert rliable.loc["sharpo", "prob_improvement"] == 1.0 and rliable.loc["sharpo", "prob_confidence"] == 0.99


def test_share_of_oracle_is_a_ratio_of_mean_paired_differences(grid):
    share = pd.read_csv(grid / "share_of_oracle.csv").set_index(["method", "oracle"])
    assert set(share.index.get_level_values("method")) == {"sharpo"}  # controls are not methods
    fatal = share.loc[("sharpo", "oracle_fatal")]
    assert fatal["share"] == pytest.approx(np.mean(ARMS["sharpo"]) / np.mean(ARMS["oracle_fatal"]))  # 2/4
    assert fatal["share_low"] < 0.5 < fatal["share_high"] and fatal["m"] == 1 and fatal["defined"]
    decisive = share.loc[("sharpo", "oracle_decisive")]
    assert not decisive["defined"] and np.isnan(decisive["share"])  # its gain over GRPO is 0 ± 10
    markdown = (grid / "share_of_oracle.md").read_text()
    assert "Oracle: decisive turns's gain over GRPO" in markdown and "is not distinguishable from 0" in markdown
    assert "| SHARPO | 0.50 [" in markdown and "| — |" in markdown


def test_power_table_from_the_oracle_paired_sd(grid):
    power = pd.read_csv(grid / "power.csv").set_index("oracle")
    sd = np.std(np.array(ARMS["oracle_fatal"]) / 20, ddof=1)
    assert power.loc["oracle_fatal", "sd_pct"] == pytest.approx(sd * 100)
    assert power.loc["oracle_fatal", "target_pct"] == pytest.approx(10.0)
    assert power.loc["oracle_fatal", "seeds_needed"] == stats.seeds_needed(0.10, sd, m=5)
    assert np.isnan(power.loc["oracle_decisive", "seeds_needed"])  # no gain to halve


def test_no_oracle_no_share_table(tmp_path):
    for arm in ("grpo", "sharpo"):
        for seed in range(3):
            write_run(tmp_path / "runs", "gates", arm, seed, 0.5)
    paths = build(tmp_path / "runs", tmp_path / "out", reps=50, figures=False)
    assert not any(p.stem in ("share_of_oracle", "power") for p in paths)
    assert (tmp_path / "out" / "tables" / "gain_over_grpo.csv").exists()


def test_arms_with_no_common_seed_have_no_probability():
    """An unfinished grid: the method's seeds and GRPO's do not overlap yet; no interval, no crash."""
    import numpy as np

    from paper_figures.bootstrap import SeedScores, improvement_over

    grpo = SeedScores((0,), ("gates",), ((np.array([0.5]),),))
    other = SeedScores((1,), ("gates",), ((np.array([0.9]),),))
    assert improvement_over({"grpo": grpo, "x": other}, "grpo", reps=10) == {}


def test_pairing_is_by_seed_id_and_a_repeated_seed_is_an_error_naming_it():
    """Seeds pair by id whatever the row order; a seed that appears twice for one arm (two runs tables
    concatenated) stops the table with an error naming the arm and the seed, not a pandas reindexing error."""
    from paper_figures.control import paired_success

    runs = pd.DataFrame({"benchmark": "gates", "method": ["grpo"] * 3 + ["rlsd"] * 3,
                         "seed": [0, 1, 2, 2, 0, 1], "success": [0.5, 0.6, 0.7, 0.9, 0.8, 0.75]})
    pairs = paired_success(runs, "gates", "rlsd", "grpo")
    assert pairs.index.tolist() == [0, 1, 2]
    assert (pairs["arm"] - pairs["reference"]).round(6).tolist() == [0.3, 0.15, 0.2]
    doubled = pd.concat([runs, runs.iloc[[4]]], ignore_index=True)
    with pytest.raises(ValueError, match=r"gates/rlsd: seed\(s\) \[0\] appear in more than one run"):
        paired_success(doubled, "gates", "rlsd", "grpo")
