"""Conformal calibration: the finite-sample guarantee by simulation, APS/RAPS by hand, bundles."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import bayesify
from bayesify import Predictive
from bayesify.methods import MCDropout
from bayesify.models import mlp
from bayesify.posthoc.conformal import Conformal, calibrate_conformal
from bayesify.posthoc.conformal_scores import class_scores


def test_threshold_is_the_finite_sample_quantile():
    conf = Conformal("normalized", torch.arange(9.0, 0.0, -1.0))  # scores 1..9, unsorted
    assert conf.threshold(0.8) == 8.0  # ceil(10 * 0.8) = 8th smallest
    assert conf.threshold(0.5) == 5.0
    assert conf.threshold(0.9) == 9.0
    assert conf.threshold(0.95) == math.inf  # ceil(9.5) = 10 > 9


def _heteroscedastic(n: int, g: torch.Generator) -> tuple[Predictive, torch.Tensor]:
    """Targets with noise sd growing in |x|; a predictive whose spread is wrong by a factor and
    whose shape is constant, so its own intervals miss."""
    x = torch.rand(n, generator=g, dtype=torch.float64) * 4 - 2
    y = torch.sin(x) + (0.1 + 0.5 * x.abs()) * torch.randn(n, generator=g, dtype=torch.float64)
    means = torch.sin(x) + 0.05 * torch.randn(8, n, generator=g, dtype=torch.float64)
    return Predictive.regression(means, 0.1), y


def _coverage_over_splits(pred, y, fit, cover, n_cal, reps, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(reps):
        perm = torch.randperm(len(y), generator=g)
        cal, test = perm[:n_cal], perm[n_cal:]
        conf = fit(pred[cal], y[cal])
        out.append(float(cover(conf, pred[test], y[test]).double().mean()))
    return np.array(out)


def _check_guarantee(cov: np.ndarray, level: float, n_cal: int) -> None:
    se = cov.std(ddof=1) / math.sqrt(len(cov))
    k = math.ceil((n_cal + 1) * level)
    assert abs(cov.mean() - k / (n_cal + 1)) < 4 * se  # exact for continuous scores
    assert cov.mean() >= level - 4 * se
    assert cov.mean() <= level + 1 / (n_cal + 1) + 4 * se


@pytest.mark.parametrize("level,n_cal", [(0.9, 50), (0.8, 30)])
def test_normalized_intervals_have_the_finite_sample_coverage(level, n_cal):
    pred, y = _heteroscedastic(1200, torch.Generator().manual_seed(0))
    lo, hi = pred.interval(level)
    raw = float(((y >= lo) & (y <= hi)).double().mean())
    assert raw < level - 0.15  # the model's own intervals are far too narrow

    def cover(conf, p, t):
        lo, hi = conf.interval(p, level)
        return (t >= lo) & (t <= hi)

    cov = _coverage_over_splits(pred, y, Conformal.fit, cover, n_cal, reps=200)
    _check_guarantee(cov, level, n_cal)


def _classification(n: int, g: torch.Generator, classes: int = 6):
    """Labels from true class probabilities; the model is over-confident (temperature 1/3)."""
    logits = 2 * torch.randn(n, classes, generator=g, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(logits, -1), 1, generator=g).squeeze(1)
    noisy = logits[None] + 0.3 * torch.randn(4, n, classes, generator=g, dtype=torch.float64)
    return Predictive.classification(torch.softmax(3 * noisy, -1)), labels


@pytest.mark.parametrize(
    "options",
    [
        {"method": "aps"},
        {"method": "aps", "randomized": True},
        {"method": "raps", "k_reg": 2, "lam": 0.05},
    ],  # fmt: skip
)
def test_prediction_sets_have_the_finite_sample_coverage(options):
    pred, y = _classification(1200, torch.Generator().manual_seed(1))
    level, n_cal = 0.9, 100
    raw = float(pred.prediction_set(level)[torch.arange(len(y)), y].double().mean())
    assert raw < level - 0.05  # over-confident: its own sets are too small
    fit_gen = torch.Generator().manual_seed(2)

    def fit(p, t):
        return Conformal.fit(p, t, generator=fit_gen, **options)

    def cover(conf, p, t):
        sets = conf.prediction_set(p, level, generator=fit_gen)
        return sets[torch.arange(len(t)), t]

    cov = _coverage_over_splits(pred, y, fit, cover, n_cal, reps=200)
    _check_guarantee(cov, level, n_cal)


# calibration rows worked by hand: (class probabilities, label, APS score = mass ranked above
# the label, RAPS score with k_reg = 1, lam = 0.3: APS + 0.3 * (rank - 1))
HAND = [
    ([0.5, 0.3, 0.15, 0.05], 1, 0.5, 0.8),
    ([0.1, 0.6, 0.3, 0.0], 1, 0.0, 0.0),
    ([0.2, 0.2, 0.5, 0.1], 0, 0.5, 0.8),  # tie: class 0 ranks before class 1
    ([0.1, 0.8, 0.05, 0.05], 0, 0.8, 1.1),
]


def _hand_calibration():
    probs = torch.tensor([p for p, *_ in HAND], dtype=torch.float64)
    labels = torch.tensor([lab for _, lab, *_ in HAND])
    return Predictive.classification(probs[None]), labels


def test_aps_and_raps_scores_and_sets_by_hand():
    pred, labels = _hand_calibration()
    aps = Conformal.fit(pred, labels, method="aps")
    raps = Conformal.fit(pred, labels, method="raps", k_reg=1, lam=0.3)
    np.testing.assert_allclose(aps.scores.numpy(), sorted(a for *_, a, _ in HAND))
    np.testing.assert_allclose(raps.scores.numpy(), sorted(r for *_, r in HAND))
    # level 0.6: ceil(5 * 0.6) = 3rd smallest score; level 0.8: the 4th
    assert aps.threshold(0.6) == pytest.approx(0.5) and raps.threshold(0.6) == pytest.approx(0.8)
    assert aps.threshold(0.8) == pytest.approx(0.8) and raps.threshold(0.8) == pytest.approx(1.1)
    test = Predictive.classification(
        torch.tensor([[[0.6, 0.25, 0.1, 0.05], [0.28, 0.26, 0.24, 0.22]]], dtype=torch.float64)
    )
    # mass above each class: 0, 0.6, 0.85, 0.95 | 0, 0.28, 0.54, 0.78
    # RAPS scores:           0, 0.9, 1.45, 1.85 | 0, 0.58, 1.14, 1.68
    at = {
        (aps, 0.6): [[1, 0, 0, 0], [1, 1, 0, 0]],  # <= 0.5
        (raps, 0.6): [[1, 0, 0, 0], [1, 1, 0, 0]],  # <= 0.8
        (aps, 0.8): [[1, 1, 0, 0], [1, 1, 1, 1]],  # <= 0.8
        (raps, 0.8): [[1, 1, 0, 0], [1, 1, 0, 0]],  # <= 1.1: the flat row shrinks
    }
    for (conf, level), expected in at.items():
        got = conf.prediction_set(test, level)
        assert got.tolist() == torch.tensor(expected, dtype=torch.bool).tolist(), (conf, level)
    assert aps.prediction_set(test, 0.85).all()  # ceil(5 * 0.85) = 5 > 4 rows: every class
    # non-randomized APS sets are the smallest top sets whose mean probability reaches q̂
    torch.testing.assert_close(aps.prediction_set(test, 0.6), test.prediction_set(0.5 + 1e-9))


def test_randomized_scores_by_hand():
    probs = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
    u = float(torch.rand((1, 1), generator=torch.Generator().manual_seed(7), dtype=torch.float64))
    got = class_scores(probs, True, generator=torch.Generator().manual_seed(7))
    np.testing.assert_allclose(got.numpy(), [[u * 0.5, 0.5 + u * 0.3, 0.8 + u * 0.2]])


def test_interval_is_mean_plus_minus_q_sigma_and_unit_free():
    pred, y = _heteroscedastic(300, torch.Generator().manual_seed(3))
    conf = Conformal.fit(pred[:200], y[:200])
    scores = ((y[:200] - pred[:200].mean).abs() / pred[:200].std).sort().values
    q = scores[math.ceil(201 * 0.9) - 1]
    lo, hi = conf.interval(pred[200:], 0.9)
    torch.testing.assert_close(lo, pred[200:].mean - q * pred[200:].std)
    torch.testing.assert_close(hi, pred[200:].mean + q * pred[200:].std)
    # the same calibration serves the predictive in other units
    lo2, hi2 = conf.interval(pred[200:].affine(10.0, 3.0), 0.9)
    torch.testing.assert_close(lo2, 10.0 + 3.0 * lo)
    torch.testing.assert_close(hi2, 10.0 + 3.0 * hi)


def test_json_round_trip_and_errors():
    pred, labels = _hand_calibration()
    raps = Conformal.fit(pred, labels, method="raps", k_reg=1, lam=0.3)
    again = Conformal.from_dict(json.loads(json.dumps(raps.to_dict())))
    assert again.method == raps.method and (again.k_reg, again.lam) == (1, 0.3)
    torch.testing.assert_close(again.scores, raps.scores)
    with pytest.raises(ValueError, match="version"):
        Conformal.from_dict({**raps.to_dict(), "version": 99})
    with pytest.raises(ValueError, match="unknown"):
        Conformal.from_dict({**raps.to_dict(), "colour": 1})
    with pytest.raises(ValueError, match="unknown conformal method 'cqr'"):
        Conformal.fit(pred, labels, method="cqr")
    with pytest.raises(ValueError, match="does not fit a classification"):
        Conformal.fit(pred, labels, method="normalized")
    with pytest.raises(ValueError, match=r"whole numbers in 0\.\.3"):
        Conformal.fit(pred, torch.tensor([0, 1, 4, 2]))
    with pytest.raises(ValueError, match="needs a conformal calibration for regression"):
        raps.interval(Predictive.regression(torch.zeros(2, 3), 1.0), 0.9)
    with pytest.raises(ValueError, match="level"):
        raps.prediction_set(pred, 1.0)
    with pytest.raises(ValueError, match="positive predictive std"):
        Conformal.fit(Predictive.regression(torch.zeros(2, 3)), torch.zeros(3))


def test_calibration_survives_a_saved_bundle(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 3, generator=g)
    y = x.sum(1) + 0.3 * torch.randn(300, generator=g)
    method = MCDropout(mlp(3, hidden=(16,), norm=None, dropout=0.1))
    method.fit((x[:200], y[:200]), val=(x[200:250], y[200:250]), epochs=3, progress=False)
    conf = calibrate_conformal(method, (x[250:], y[250:]), samples=20, seed=1, method="normalized")
    assert conf.n == 50 and conf.samples == 20
    method.save(tmp_path / "b")
    loaded = bayesify.load(tmp_path / "b")
    back = Conformal.from_dict(loaded.metadata["conformal"])
    torch.testing.assert_close(back.scores, conf.scores)
    after = back.interval(loaded.predict(x[:10], samples=20, seed=2), 0.8)
    before = conf.interval(method.predict(x[:10], samples=20, seed=2), 0.8)
    for a, b in zip(after, before, strict=True):
        torch.testing.assert_close(a, b)
