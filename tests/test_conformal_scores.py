"""Classification conformal scores against brute-force loops over their published definitions
(split conformal's ``1 - p_y``, Sadinle et al. 2019; APS, Romano et al. 2020; RAPS, Angelopoulos
et al. 2021), and the split score's finite-sample coverage over many calibration/test splits of
exchangeable synthetic data."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bayesify import Predictive
from bayesify.posthoc.conformal import Conformal, ConformalByPolicy
from bayesify.posthoc.sampling import SamplingPolicy


def _score(p: np.ndarray, y: int, u: float, k_reg: int, lam: float, kind: str) -> float:
    """One row's score of class ``y`` by the papers' definitions, one class at a time."""
    if kind == "lac":
        return 1.0 - p[y]
    # rank o(x, y), from 1: classes with a larger probability, or equal and a lower index, first
    above = [j for j in range(len(p)) if p[j] > p[y] or (p[j] == p[y] and j < y)]
    rank = len(above) + 1
    mass = sum(p[j] for j in above)
    return mass + u * p[y] + lam * max(0, rank - k_reg)


def _quantile(scores: list[float], level: float) -> float:
    n = len(scores)
    k = math.ceil((n + 1) * level)
    return math.inf if k > n else sorted(scores)[k - 1]


CASES = {
    "lac": ({"method": "lac"}, 0, 0.0),
    "aps": ({"method": "aps"}, 0, 0.0),
    "aps-randomized": ({"method": "aps", "randomized": True}, 0, 0.0),
    "raps": ({"method": "raps", "randomized": True, "k_reg": 2, "lam": 0.07}, 2, 0.07),
    "raps-plain": ({"method": "raps", "k_reg": 1, "lam": 0.2}, 1, 0.2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_scores_and_sets_equal_the_definitions_by_brute_force(case):
    options, k_reg, lam = CASES[case]
    g = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(2, 40, 5, generator=g, dtype=torch.float64), -1)
    probs[:, 0] = torch.tensor([0.3, 0.3, 0.2, 0.1, 0.1])  # ties rank by class index
    cal, test = Predictive.classification(probs[:, :30]), Predictive.classification(probs[:, 30:])
    y = torch.randint(0, 5, (30,), generator=g)
    randomized = options.get("randomized", False)
    conf = Conformal.fit(cal, y, generator=torch.Generator().manual_seed(9), **options)
    # the implementation draws one U per row from the generator; the reference uses the same U
    u_cal = torch.rand((30, 1), generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    u_cal = u_cal[:, 0].numpy() if randomized else np.zeros(30)
    kind = "lac" if options["method"] == "lac" else "aps"
    p_cal = cal.mean.numpy()
    ref = [_score(p_cal[i], int(y[i]), u_cal[i], k_reg, lam, kind) for i in range(30)]
    np.testing.assert_allclose(conf.scores.numpy(), np.sort(ref), atol=1e-12)
    level = 0.8
    sets = conf.prediction_set(test, level, generator=torch.Generator().manual_seed(4))
    u_test = torch.rand((10, 1), generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    u_test = u_test[:, 0].numpy() if randomized else np.zeros(10)
    q = _quantile(ref, level)
    p_test = test.mean.numpy()
    want = [[_score(p_test[i], c, u_test[i], k_reg, lam, kind) <= q for c in range(5)]
            for i in range(10)]  # fmt: skip
    assert sets.tolist() == want


def test_the_split_score_round_trips_through_a_bundles_json():
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(3, 50, 4, generator=g, dtype=torch.float64), -1)
    pred, y = Predictive.classification(probs), torch.randint(0, 4, (50,), generator=g)
    conf = Conformal.fit(pred, y, method="lac")
    back = ConformalByPolicy.from_dict(ConformalByPolicy({SamplingPolicy.fixed(3): conf}).to_dict())
    again = back.select(SamplingPolicy.fixed(3))[0]
    assert again.method.value == "lac" and torch.equal(again.scores, conf.scores)
    assert torch.equal(again.prediction_set(pred, 0.7), conf.prediction_set(pred, 0.7))
    with pytest.raises(ValueError, match="randomized scores are APS's and RAPS's"):
        Conformal.fit(pred, y, method="lac", randomized=True)


def test_split_sets_have_the_finite_sample_coverage():
    """Continuous scores: mean coverage over splits is ⌈(n+1)·level⌉/(n+1), within
    [level, level + 1/(n+1)]; the model's own sets (over-confident) cover far less."""
    g = torch.Generator().manual_seed(1)
    n, classes, n_cal, level, reps = 1200, 6, 100, 0.9, 300
    logits = 2 * torch.randn(n, classes, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(logits, -1), 1, generator=g).squeeze(1)
    noisy = logits[None] + 0.3 * torch.randn(4, n, classes, generator=g, dtype=torch.float64)
    pred = Predictive.classification(torch.softmax(3 * noisy, -1))
    raw = float(pred.prediction_set(level)[torch.arange(n), y].double().mean())
    assert raw < level - 0.05
    cov = []
    for _ in range(reps):
        perm = torch.randperm(n, generator=g)
        cal, test = perm[:n_cal], perm[n_cal:]
        sets = Conformal.fit(pred[cal], y[cal], method="lac").prediction_set(pred[test], level)
        cov.append(float(sets[torch.arange(len(test)), y[test]].double().mean()))
    cov_arr = np.array(cov)
    se = cov_arr.std(ddof=1) / math.sqrt(reps)
    exact = math.ceil((n_cal + 1) * level) / (n_cal + 1)
    assert abs(cov_arr.mean() - exact) < 4 * se
    assert level - 4 * se <= cov_arr.mean() <= level + 1 / (n_cal + 1) + 4 * se
