"""bench.summary.mean_se, the one mean ± standard error of the benchmark pages, against numpy and
scipy.stats.sem, with its None / NaN / one-value policies."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.stats import sem

from bayesify.bench.summary import mean_se


@pytest.mark.parametrize("n", [2, 3, 7, 50])
def test_mean_and_standard_error_are_numpys_mean_and_scipys_sem(n):
    values = np.random.default_rng(n).normal(3.0, 2.0, n) * 10.0 ** np.arange(n) % 97
    m, se = mean_se(values.tolist())
    assert m == pytest.approx(float(np.mean(values)), rel=1e-12)
    assert se == pytest.approx(float(sem(values)), rel=1e-12)  # sample std (ddof 1) / √n
    assert se == pytest.approx(float(np.std(values, ddof=1) / np.sqrt(n)), rel=1e-12)


def test_one_value_has_scipys_nan_or_the_callers_zero():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's SmallSampleWarning
        assert math.isnan(float(sem([4.5])))  # scipy's: no standard error from one value
    m, se = mean_se([4.5])
    assert m == 4.5 and math.isnan(se)
    assert mean_se([4.5], single=0.0) == (4.5, 0.0)
    assert mean_se([None, 4.5, None], drop="none", single=0.0) == (4.5, 0.0)


def test_no_values_give_nan_for_both():
    for values, drop in (([], "nothing"), ([None], "none"), ([None, math.nan], "non-finite")):
        m, se = mean_se(values, drop=drop)
        assert math.isnan(m) and math.isnan(se)


def test_nones_raise_unless_dropped():
    with pytest.raises(TypeError, match="None"):
        mean_se([1.0, None, 2.0])
    m, se = mean_se([1.0, None, 2.0, 4.0], drop="none")
    assert m == pytest.approx(7 / 3) and se == pytest.approx(float(sem([1.0, 2.0, 4.0])))


def test_nan_and_inf_count_unless_non_finite_values_are_dropped():
    values = [1.0, math.nan, 2.0, math.inf, 4.0]
    for drop in ("nothing", "none"):
        m, se = mean_se(values, drop=drop)
        assert math.isnan(m) and math.isnan(se)
        assert math.isnan(float(sem(values)))  # scipy's nan_policy="propagate"
    m, se = mean_se([*values, None], drop="non-finite")
    assert m == pytest.approx(7 / 3)
    assert se == pytest.approx(float(sem([1.0, 2.0, 4.0])))
    assert math.isinf(mean_se([1.0, math.inf])[0]) and math.isnan(mean_se([1.0, math.inf])[1])


def test_a_spread_beyond_the_float_range_is_inf_not_overflow_error():
    m, se = mean_se([1e308, -1e308, 1e308, -1e308])
    assert m == 0.0 and math.isinf(se)
