"""A conformal calibration too small for a level (⌈(n+1)·level⌉ > n, so q̂ is infinite) is
refused in one line where it would be stored or served, never an interval of ±inf."""

from __future__ import annotations

import math

import pytest
import torch

from bayesify.posthoc.conformal import Conformal
from bayesify.predictive import Predictive


def _calibration(n: int) -> tuple[Conformal, Predictive]:
    g = torch.Generator().manual_seed(0)
    pred = Predictive.regression(torch.randn(16, n, generator=g), noise_variance=1.0)
    y = torch.randn(n, generator=g)
    return Conformal.fit(pred, y), pred


@pytest.mark.parametrize("n", [1, 8, 9, 19, 20])
def test_the_level_limit_is_n_over_n_plus_one(n):
    conf, pred = _calibration(n)
    for level in (0.5, 0.9, 0.95):
        infinite = math.ceil((n + 1) * level - 1e-9) > n  # the definition, independently
        assert math.isinf(conf.threshold(level)) == infinite
        if infinite:
            with pytest.raises(ValueError) as info:
                conf.check_rows_for(level)
            said = str(info.value)
            assert "\n" not in said and f"holds {n} row(s)" in said
            need = next(m for m in range(1, 1000) if math.ceil((m + 1) * level - 1e-9) <= m)
            assert f"needs at least {need})" in said
            assert f"up to {n / (n + 1):.3g}" in said
        else:
            conf.check_rows_for(level)
            lo, hi = conf.interval(pred, level)
            assert torch.isfinite(lo).all() and torch.isfinite(hi).all()
