"""The closed-form statistics behind the tables: t confidence intervals and rliable's aggregates, on known numbers."""
from __future__ import annotations

import math

import numpy as np
import pytest
from rliable import library as rly
from rliable import metrics as rly_metrics

from paper_figures import stats


def test_mean_ci_on_known_numbers():
    mean, half, n = stats.mean_ci([1.0, 2.0, 3.0])
    # s = 1, t_{0.975, 2} = 4.302653
    assert (mean, n) == (2.0, 3)
    assert half == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    mean, half, n = stats.mean_ci([0.7057, 0.7057])
    assert mean == pytest.approx(0.7057) and half == pytest.approx(0.0)


def test_mean_ci_single_and_empty_and_nan():
    assert stats.mean_ci([0.5])[0] == 0.5 and math.isnan(stats.mean_ci([0.5])[1])
    mean, half, n = stats.mean_ci([])
    assert math.isnan(mean) and math.isnan(half) and n == 0
    assert stats.mean_ci([1.0, float("nan"), 3.0])[:1] == (2.0,) and stats.mean_ci([1.0, float("nan"), 3.0])[2] == 2


def test_iqm_of_a_known_array_and_equal_to_rliable():
    assert stats.iqm(np.arange(8.0)) == pytest.approx(3.5)  # middle four: 2, 3, 4, 5
    assert stats.iqm(np.array([[0.0, 100.0, 1.0, 2.0]])) == pytest.approx(1.5)  # the outliers are cut
    rng = np.random.default_rng(0)
    for shape in [(3, 134), (5, 7), (2, 1)]:
        scores = rng.random(shape)
        assert stats.iqm(scores) == pytest.approx(rly_metrics.aggregate_iqm(scores))


def test_probability_of_improvement_known_answers():
    low, high = np.zeros((3, 10)), np.ones((3, 10))
    assert stats.probability_of_improvement(high, low) == 1.0
    assert stats.probability_of_improvement(low, high) == 0.0
    same = np.random.default_rng(1).integers(0, 2, (3, 10)).astype(float)
    assert stats.probability_of_improvement(same, same) == 0.5
    # one task, x = [1, 0], y = [0, 0]: pairs (1>0) twice, ties twice → (2 + 0.5·2) / 4
    assert stats.probability_of_improvement(np.array([[1.0], [0.0]]), np.zeros((2, 1))) == 0.75


def test_probability_of_improvement_equals_rliable():
    rng = np.random.default_rng(2)
    for n_x, n_y in [(3, 3), (3, 2), (5, 4)]:
        x = rng.integers(0, 2, (n_x, 20)).astype(float)
        y = rng.random((n_y, 20)).round(1)
        assert stats.probability_of_improvement(x, y) == pytest.approx(rly_metrics.probability_of_improvement(x, y))
    with pytest.raises(ValueError, match="same tasks"):
        stats.probability_of_improvement(np.zeros((2, 3)), np.zeros((2, 4)))


def test_score_distribution_equals_rliable():
    rng = np.random.default_rng(5)
    scores, taus = rng.random((3, 25)), np.linspace(0, 1, 11)
    assert np.allclose(stats.score_distribution(scores, taus), rly.score_distributions(scores, taus))
