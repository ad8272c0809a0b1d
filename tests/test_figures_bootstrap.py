"""The bootstrap over training seeds: intervals as wide as the seeds' spread allows, not as narrow as the episode
count suggests; task types as rliable tasks; P(> baseline) paired by seed."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from paper_figures import bootstrap, stats

SEED_MEANS = [0.60, 0.72, 0.80, 0.88, 0.95]  # five training seeds whose means differ widely


def episodes(method: str, means, n_episodes: int = 2000, types=("t",), offset: float = 0.0) -> pd.DataFrame:
    """Final-eval episodes whose per-seed success rate is exactly ``mean`` (+ offset), spread over ``types``."""
    rows = []
    for seed, mean in enumerate(means):
        wins = int(round((mean + offset) * n_episodes))
        outcomes = np.r_[np.ones(wins), np.zeros(n_episodes - wins)]
        np.random.default_rng(seed).shuffle(outcomes)
        rows += [{"method": method, "seed": seed, "task_type": types[i % len(types)], "success": o}
                 for i, o in enumerate(outcomes)]
    return pd.DataFrame(rows)


def test_interval_is_as_wide_as_the_seed_means_allow_not_the_episode_count():
    scores = bootstrap.seed_scores(episodes("grpo", SEED_MEANS))
    point, low, high = bootstrap.interval_estimates(scores, reps=2000, seed=0)["grpo"]["Mean"]
    mean, t_half, n = stats.mean_ci(SEED_MEANS)
    assert point == pytest.approx(mean) and n == 5
    # what treating the 10,000 episodes as independent would give: a binomial interval of ±0.8 points
    naive_half = 1.96 * np.sqrt(mean * (1 - mean) / (5 * 2000))
    half = (high - low) / 2
    assert half > 10 * naive_half
    assert 0.8 * t_half < half < 1.3 * t_half  # the Student-t interval over the five seed means: ±0.17
    assert low < mean - 0.7 * t_half and high > mean + 0.7 * t_half


def test_expansion_factor_matches_the_t_quantile():
    assert bootstrap.expansion(5) == pytest.approx(np.sqrt(5 / 4) * scipy_stats.t.ppf(0.975, 4) / 1.959964, rel=1e-5)
    assert bootstrap.expansion(1000) == pytest.approx(1.0, abs=0.01)
    assert np.isnan(bootstrap.expansion(1))


def test_one_seed_has_no_interval_and_constant_scores_collapse():
    one = bootstrap.seed_scores(episodes("a", [0.5], n_episodes=100))
    point, low, high = bootstrap.interval_estimates(one, reps=100)["a"]["Mean"]
    assert point == 0.5 and np.isnan(low) and np.isnan(high)
    flat = bootstrap.seed_scores(episodes("a", [1.0, 1.0, 1.0], n_episodes=50))
    assert bootstrap.interval_estimates(flat, reps=100)["a"]["Mean"] == pytest.approx((1.0, 1.0, 1.0))


def test_task_types_are_the_rliable_tasks():
    scores = bootstrap.seed_scores(episodes("a", SEED_MEANS, n_episodes=600, types=("pick", "look", "heat")))
    assert scores["a"].types == ("heat", "look", "pick") and scores["a"].matrix().shape == (5, 3)
    iqm_point = bootstrap.interval_estimates(scores, reps=50)["a"]["IQM"][0]
    assert iqm_point == pytest.approx(stats.iqm(scores["a"].matrix()))


def test_aggregates_agree_with_the_closed_form_ones():
    rng = np.random.default_rng(0)
    stack = rng.random((4, 5, 3))
    assert np.allclose(bootstrap.iqm_batched(stack), [stats.iqm(m) for m in stack])
    other = rng.random((4, 5, 3))
    assert np.allclose(bootstrap.probability_of_improvement_batched(stack, other),
                       [stats.probability_of_improvement(x, y) for x, y in zip(stack, other)])


def test_probability_of_improvement_is_paired_by_seed():
    mixed = [m + d for m, d in zip(SEED_MEANS, [0.04, -0.04, 0.04, -0.04, 0.04])]
    frame = pd.concat([episodes("grpo", SEED_MEANS, 400), episodes("same", SEED_MEANS, 400),
                       episodes("better", SEED_MEANS, 400, offset=0.04), episodes("mixed", mixed, 400)])
    scores = bootstrap.seed_scores(frame)
    result = bootstrap.improvement_over(scores, "grpo", reps=1000, seed=0)
    assert result["same"] == (0.5, 0.5, 0.5)  # every seed ties with its own GRPO run
    # +4 points on every seed over the same seed's GRPO run: better on each resample of seeds. Resampling the two
    # arms independently (before) scored 15/25 here, with an interval reaching below 0.5, because it compared a
    # seed with GRPO's other seeds, whose spread (60-95%) dwarfs the gain.
    assert result["better"] == (1.0, 1.0, 1.0)
    point, low, high = result["mixed"]
    assert point == pytest.approx(3 / 5) and low < 0.5 < high  # better on 3 seeds of 5: not a finding
    assert bootstrap.improvement_over(scores, "absent") == {}


def test_intervals_do_not_move_when_a_method_is_added():
    base = episodes("grpo", SEED_MEANS, 200)
    alone = bootstrap.interval_estimates(bootstrap.seed_scores(base), reps=200, seed=1)
    more = bootstrap.interval_estimates(bootstrap.seed_scores(pd.concat([base, episodes("x", SEED_MEANS, 200)])),
                                        reps=200, seed=1)
    assert alone["grpo"] == more["grpo"]


def test_seed_interval_and_profiles():
    point, low, high = bootstrap.seed_interval([0.5, 0.6, 0.7, 0.8, 0.9], reps=2000)
    assert point == pytest.approx(0.7) and low < 0.6 and high > 0.8
    frame = episodes("a", SEED_MEANS, 100).rename(columns={"success": "score"})
    taus, fraction, band = bootstrap.performance_profiles(frame, "score", np.array([-0.5, 0.5, 1.0]), reps=200)["a"]
    assert fraction[0] == 1.0 and fraction[1] == pytest.approx(np.mean(SEED_MEANS)) and fraction[2] == 0.0
    assert np.all(band >= 0) and np.all(band <= 1) and band[0, 1] < fraction[1] < band[1, 1]
