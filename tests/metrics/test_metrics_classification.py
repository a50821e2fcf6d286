"""Classification metrics against sklearn, scipy, brute-force loops and hand-worked examples."""

import math

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.metrics import accuracy_score, brier_score_loss, log_loss

from bayesify.metrics import (
    PROB_FLOOR,
    brier_score,
    entropy,
    error_rate,
    expected_calibration_error,
    expected_entropy,
    mutual_information,
    nll,
    reliability_curve,
)


def _random_probs(rng: np.random.Generator, shape, concentration: float = 1.0) -> np.ndarray:
    return rng.dirichlet(np.full(shape[-1], concentration), size=shape[:-1])


def _data(seed: int = 0, n: int = 300, c: int = 4):
    rng = np.random.default_rng(seed)
    return _random_probs(rng, (n, c), 0.5), rng.integers(0, c, n)


def test_nll_matches_sklearn_log_loss():
    probs, labels = _data(1)
    ours = nll(torch.tensor(probs), torch.tensor(labels)).item()
    assert ours == pytest.approx(log_loss(labels, probs, labels=range(4)), rel=1e-10)


def test_nll_clamps_zero_probability():
    per_point = nll([[1.0, 0.0], [0.5, 0.5]], [1, 0], reduction="none")
    assert per_point[0].item() == pytest.approx(-math.log(PROB_FLOOR))
    assert per_point[1].item() == pytest.approx(math.log(2))


def test_brier_matches_sklearn():
    probs, labels = _data(2)
    ours = brier_score(probs, labels).item()
    assert ours == pytest.approx(brier_score_loss(labels, probs, labels=range(4)), rel=1e-10)
    # for two classes sklearn halves by default ("auto"); our multiclass definition does not
    probs2, labels2 = _data(3, c=2)
    half = brier_score_loss(labels2, probs2[:, 1])
    assert brier_score(probs2, labels2).item() == pytest.approx(2 * half, rel=1e-10)


def test_error_rate_matches_sklearn_and_breaks_ties_low():
    probs, labels = _data(4)
    ours = error_rate(probs, labels).item()
    assert ours == pytest.approx(1 - accuracy_score(labels, probs.argmax(1)), abs=1e-12)
    assert error_rate([[0.5, 0.5]], [0]).item() == 0.0
    assert error_rate([[0.5, 0.5], [0.2, 0.8]], [1, 1], reduction="sum").item() == 1.0


def test_ece_hand_worked_example():
    # top-label confidences 0.55 (right), 0.58 (wrong), 0.65 (wrong), 0.95 (right), 0.85 (right)
    probs = [[0.55, 0.45], [0.42, 0.58], [0.35, 0.65], [0.95, 0.05], [0.15, 0.85]]
    labels = [0, 0, 0, 0, 1]
    # 10 bins: (0.5, 0.6] holds 0.55 & 0.58 -> |0.5 - 0.565| * 2/5; (0.6, 0.7]: |0 - 0.65| / 5;
    # (0.8, 0.9]: |1 - 0.85| / 5; (0.9, 1]: |1 - 0.95| / 5  => (0.13 + 0.65 + 0.15 + 0.05) / 5
    ece = expected_calibration_error(probs, labels, n_bins=10).item()
    assert ece == pytest.approx(0.98 / 5, abs=1e-12)
    curve = reliability_curve(probs, labels, n_bins=10)
    assert curve.counts.tolist() == [0, 0, 0, 0, 0, 2, 1, 0, 1, 1]
    assert curve.confidence[5].item() == pytest.approx(0.565)
    assert curve.accuracy[5].item() == pytest.approx(0.5)
    assert torch.isnan(curve.accuracy[0]) and torch.isnan(curve.confidence[7])


def test_ece_bins_are_closed_on_the_right():
    curve = reliability_curve([[0.5, 0.5], [0.0, 1.0]], [0, 0], n_bins=2)
    assert curve.counts.tolist() == [1, 1]  # 0.5 -> (0, 0.5]; 1.0 -> (0.5, 1]
    assert curve.bin_edges.tolist() == [0.0, 0.5, 1.0]


def _ece_loop(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> float:
    conf, pred = probs.max(1), probs.argmax(1)
    total = 0.0
    for b in range(n_bins):
        lower, upper = b / n_bins, (b + 1) / n_bins
        in_bin = [k for k in range(len(conf)) if lower < conf[k] <= upper]
        if in_bin:
            acc = np.mean([pred[k] == labels[k] for k in in_bin])
            total += len(in_bin) / len(conf) * abs(acc - np.mean(conf[in_bin]))
    return total


@pytest.mark.parametrize("n_bins", [1, 7, 15])
def test_ece_matches_brute_force_loop(n_bins):
    probs, labels = _data(5, n=200, c=3)
    ours = expected_calibration_error(torch.tensor(probs), labels, n_bins=n_bins).item()
    assert ours == pytest.approx(_ece_loop(probs, labels, n_bins), abs=1e-12)
    curve = reliability_curve(probs, labels, n_bins=n_bins)
    full = curve.counts > 0
    weights = curve.counts[full].double() / curve.counts.sum()
    from_curve = (weights * (curve.accuracy[full] - curve.confidence[full]).abs()).sum()
    assert from_curve.item() == pytest.approx(ours, abs=1e-12)


def test_entropy_matches_scipy_including_zeros():
    rng = np.random.default_rng(6)
    probs = _random_probs(rng, (4, 5, 3), 0.3)
    probs[0, 0] = [1.0, 0.0, 0.0]
    probs[1, 2] = [0.5, 0.0, 0.5]
    ours = entropy(torch.tensor(probs))
    assert ours.shape == (4, 5)
    np.testing.assert_allclose(ours.numpy(), stats.entropy(probs, axis=-1), atol=1e-12)
    assert ours[0, 0].item() == 0.0


def test_expected_entropy_and_mutual_information_match_scipy():
    rng = np.random.default_rng(7)
    sample_probs = _random_probs(rng, (8, 30, 4), 0.7)  # [T, N, C]
    ee = expected_entropy(sample_probs).numpy()
    mi = mutual_information(torch.tensor(sample_probs)).numpy()
    ref_ee = stats.entropy(sample_probs, axis=-1).mean(0)
    ref_mi = stats.entropy(sample_probs.mean(0), axis=-1) - ref_ee
    np.testing.assert_allclose(ee, ref_ee, rtol=1e-12)
    np.testing.assert_allclose(mi, ref_mi, rtol=1e-10, atol=1e-12)
    assert (mi > 0).all() and (mi <= math.log(4)).all()


def test_mutual_information_is_zero_when_samples_agree():
    rng = np.random.default_rng(8)
    one = _random_probs(rng, (20, 5))
    mi = mutual_information(np.repeat(one[None], 10, axis=0))
    assert mi.shape == (20,)
    assert (mi >= 0).all() and mi.max().item() < 1e-12


def test_dtype_follows_probabilities():
    probs32 = torch.softmax(torch.randn(10, 3), dim=1)
    labels = torch.randint(0, 3, (10,))
    for fn in (nll, brier_score, error_rate, expected_calibration_error):
        assert fn(probs32, labels).dtype == torch.float32
    assert entropy(probs32.double()).dtype == torch.float64
