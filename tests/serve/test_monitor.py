"""The monitor on its own (no server): regression figures under a heteroscedastic mixture
against scipy, outcome bounds, drift that one feedback request cannot raise, memory bounds."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from scipy.stats import norm

from bayesify import metrics
from bayesify.serve.figures import classification_figures, classification_terms, leave_one_out
from bayesify.serve.monitor import ACCEPTED, ALREADY, FLAGGED, Monitor


def _rows(rng: np.random.Generator, n: int, t: int):
    """Served regression rows: sample means [N, T], noise per sample [N, T] and records."""
    means = rng.normal(0, 1, (n, 1)) + rng.normal(0, 0.5, (n, t))
    noise = rng.uniform(0.2, 1.0, (n, t))
    mean = means.mean(1)
    std = np.sqrt(means.var(1) + (noise**2).mean(1))
    recs = [{"mean": m, "std": s, "aleatoric_variance": float((v**2).mean()), "lower": m - s,
             "upper": m + s} for m, s, v in zip(mean, std, noise, strict=True)]  # fmt: skip
    return means, noise, recs


def test_regression_figures_under_a_heteroscedastic_mixture_match_scipy():
    rng = np.random.default_rng(0)
    means, noise, recs = _rows(rng, 40, 12)
    mon = Monitor("regression", name="m", version="3")
    _, ids = mon.record_request(recs, samples=means, noise_std=noise, level=0.68)
    y = means.mean(1) + rng.normal(0, 1.2, 40)
    assert [mon.feedback(i, float(v))[0] for i, v in zip(ids, y, strict=True)] == [ACCEPTED] * 40
    mon.refresh()
    f = mon.figures()["all"]
    logp = logsumexp(norm.logpdf(y[:, None], means, noise), axis=1) - math.log(12)
    pit = norm.cdf(y[:, None], means, noise).mean(1)
    assert f["nll"] == pytest.approx(-logp.mean(), rel=1e-5)
    assert f["pit_counts"] == np.histogram(pit, bins=10, range=(0, 1))[0].tolist()
    mean = np.array([r["mean"] for r in recs])
    assert f["error"] == pytest.approx(np.sqrt(((y - mean) ** 2).mean()), rel=1e-9)
    covered = np.abs(y - mean) <= np.array([r["std"] for r in recs])
    assert f["interval_coverage"] == pytest.approx(covered.mean())
    assert f["interval_level"] == pytest.approx(0.68)


def test_outcomes_beyond_the_bound_are_flagged_and_received_once():
    rng = np.random.default_rng(1)
    means, noise, recs = _rows(rng, 4, 8)
    mon = Monitor("regression", target_range=(-3.0, 5.0))  # widened by its width: -11 .. 13
    _, ids = mon.record_request(recs, samples=means, noise_std=noise)
    assert mon.feedback(ids[0], 12.9) == (ACCEPTED, None)
    status, reason = mon.feedback(ids[1], 13.5)
    assert status == FLAGGED and "-11 .. 13" in reason and "-3 .. 5" in reason
    assert mon.feedback(ids[1], 0.0) == (ALREADY, None)
    mon.refresh()
    assert mon.figures()["feedback"] == {"accepted": 1, "flagged": 1}
    # no recorded range: 1000 served standard deviations from the served mean
    mon = Monitor("regression")
    _, ids = mon.record_request(recs, samples=means, noise_std=noise)
    std = recs[0]["std"]
    assert mon.feedback(ids[0], recs[0]["mean"] + 999 * std)[0] == ACCEPTED
    assert mon.feedback(ids[1], recs[1]["mean"] - 1001 * recs[1]["std"])[0] == FLAGGED
    mon.refresh()
    assert math.isfinite(mon.figures()["all"]["nll"])


def _classify(mon: Monitor, n: int, good: bool) -> None:
    """One feedback request of n confident rows (p = 0.9 on class 0): good ones are calibrated
    (every tenth is another class), bad ones all wrong."""
    _, ids = mon.record_request([{"probabilities": [0.9, 0.05, 0.05]}] * n)
    for i, row in enumerate(ids):
        mon.feedback(row, 1.0 if not good or i % 10 == 0 else 0.0)
    mon.refresh()


def test_one_wrong_feedback_request_raises_no_drift_warning(caplog):
    validation = {"error_all": 0.1, "nll_all": 0.4, "ece_all": 0.02}
    mon = Monitor("classification", ["a", "b", "c"], validation)
    with caplog.at_level(logging.WARNING):
        for n, good in ((100, True), (50, True), (100, False), (100, True)):
            _classify(mon, n, good)
            if not good:  # 250 rows, 40 % wrong: far past every baseline...
                live = {d["figure"]: d["live"] for d in mon.figures()["drift"]}
                assert live["error"] > 0.4 and live["nll"] > 1.2 and live["ece"] > 0.3
            # ... but not without that one request's rows
            assert mon.drifting == [] and not caplog.records
        assert all(not d["drifting"] for d in mon.figures()["drift"])
        _classify(mon, 100, good=False)  # a second wrong request: drift from either alone
        assert mon.drifting == ["ece_all", "error_all", "nll_all"]
        assert len(caplog.records) == 3
    assert {d["figure"] for d in mon.figures()["drift"] if d["drifting"]} == {"ece", "error", "nll"}


def test_drift_figures_by_request_are_the_window_figures():
    rng = np.random.default_rng(5)
    probs = rng.dirichlet(np.ones(4), 300)
    labels = rng.integers(0, 4, 300)
    terms = classification_terms(probs, labels)
    groups = rng.integers(0, 7, 300)
    sums, counts = leave_one_out(terms["ece"], groups)
    for j, g in enumerate(np.unique(groups)):
        keep = groups != g
        ece = metrics.expected_calibration_error(torch.as_tensor(probs[keep]),
                                                 torch.as_tensor(labels[keep]))  # fmt: skip
        assert np.abs(sums[1 + j]).sum() / counts[1 + j] == pytest.approx(float(ece), rel=1e-9)
    figs = classification_figures(terms)
    p, y = torch.as_tensor(probs), torch.as_tensor(labels)
    assert figs["nll"] == pytest.approx(float(metrics.nll(p, y)), rel=1e-9)
    assert figs["error"] == pytest.approx(float(metrics.error_rate(p, y)), rel=1e-12)
    assert figs["ece"] == pytest.approx(float(metrics.expected_calibration_error(p, y)), rel=1e-9)


def test_a_negative_nll_baseline_is_not_drift_when_the_live_nll_is_lower():
    def live_nll(outcome: float) -> dict:
        mon = Monitor("regression", validation={"nll_all": -2.0}, min_count=20,
                      max_feedback_rows=10, window=100)  # fmt: skip
        for _ in range(3):  # three requests of ten
            recs = [{"mean": 0.0, "std": 0.05, "aleatoric_variance": 0.0025, "lower": -0.1,
                     "upper": 0.1}] * 10  # fmt: skip
            _, ids = mon.record_request(recs, samples=np.zeros((10, 4)),
                                        noise_std=np.full((10, 1), 0.05))  # fmt: skip
            for i in ids:
                mon.feedback(i, outcome)
            mon.refresh()
        return next(d for d in mon.figures()["drift"] if d["figure"] == "nll")

    row = live_nll(0.0)  # -log N(0; 0, 0.05²) = -2.30: better than the baseline
    assert row["live"] == pytest.approx(-norm.logpdf(0, 0, 0.05)) and not row["drifting"]
    row = live_nll(0.15)  # three standard deviations off: 2.2 nats worse
    assert row["live"] == pytest.approx(-norm.logpdf(0.15, 0, 0.05)) and row["drifting"]


def test_pending_rows_are_bounded_by_the_numbers_they_hold():
    rng = np.random.default_rng(3)
    means, noise, recs = _rows(rng, 10, 50)
    mon = Monitor("regression", max_pending_values=400)  # 4 rows of 50 means and 50 noises
    _, ids = mon.record_request(recs, samples=means, noise_std=noise)
    assert [mon.feedback(i, 0.0)[0] for i in ids] == ["unknown"] * 6 + [ACCEPTED] * 4


def test_the_served_model_hands_the_monitor_each_samples_noise():
    from bayesify.methods import MCDropout
    from bayesify.models import mlp
    from bayesify.predictor import Predictor
    from bayesify.serve.model import PassKey, ServedModel

    torch.manual_seed(0)
    method = MCDropout(mlp(3, 2, (8,), norm=None, dropout=0.2), task="regression",
                       likelihood="heteroscedastic")  # fmt: skip
    served = ServedModel(Predictor(method), "h")
    x = np.random.default_rng(4).normal(size=(5, 3))
    answer = served.run(PassKey(6), [x])[0]
    assert answer.noise_std.shape == (5, 6)
    var = np.array([r["aleatoric_variance"] for r in answer.records])
    assert (answer.noise_std**2).mean(1) == pytest.approx(var, rel=1e-6)
    assert (answer.noise_std.std(1) > 0).all()  # each sample its own noise


def test_models_of_one_server_share_the_metric_families_each_with_its_labels():
    from bayesify.serve.metrics import MetricFamilies, ServerMetrics

    families = MetricFamilies()
    a, b = ServerMetrics("a", "1", families), ServerMetrics("b", "2", families)
    a.served([True, False], [8, 8])
    b.served([False], [16])
    b.request("/v1/predict", "POST", 200, 0.01)
    text = families.text().decode()
    assert text.count("# TYPE bayesify_rows_total counter") == 1
    assert 'bayesify_rows_total{model="a",version="1"} 2.0' in text
    assert 'bayesify_rows_total{model="b",version="2"} 1.0' in text
    assert 'bayesify_deferral_rate{model="a",version="1"} 0.5' in text
    assert 'code="200",endpoint="/v1/predict",method="POST",model="b",version="2"' in text
