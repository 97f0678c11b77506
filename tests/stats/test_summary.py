"""'mean ± std over seeds': one definition, the sample std."""

from __future__ import annotations

import math

import pytest

from fedcore.stats.summary import mean_std


def test_the_std_is_the_sample_std():
    # Squared deviations from 2.5: 2.25, 0.25, 0.25, 2.25 (sum 5); the sample std divides by n - 1 = 3.
    m, s = mean_std([1.0, 2.0, 3.0, 4.0])
    assert m == 2.5 and s == pytest.approx(math.sqrt(5 / 3))
    assert s != pytest.approx(math.sqrt(5 / 4))  # not the population std


def test_missing_and_diverged_values_are_left_out():
    assert mean_std([0.5, None, math.nan, 0.7, math.inf]) == pytest.approx((0.6, math.sqrt(0.02)))


def test_one_value_has_no_spread_and_none_gives_nan():
    assert mean_std([0.8]) == (0.8, 0.0)
    assert all(math.isnan(x) for x in mean_std([]))
    assert all(math.isnan(x) for x in mean_std([None, math.nan]))
