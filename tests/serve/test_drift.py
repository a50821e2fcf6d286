"""The drift tests against scipy's, and their false-alarm rates on simulated unshifted streams
(fixed seeds; a rate may exceed the level by at most three binomial standard errors of the
simulation) beside their power on shifted ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bayesify.serve.drift import WindowPart, drift_rows
from bayesify.serve.figures import classification_figures, classification_terms


def classify(probs: np.ndarray, labels: np.ndarray, per_request: int = 100):
    """Window figures and parts of classification rows, ``per_request`` rows per request."""
    groups = np.arange(len(labels)) // per_request
    terms = classification_terms(probs, labels)
    figs = classification_figures(terms)
    part = WindowPart(probs, labels, terms, groups)
    return {"all": figs, "accepted": {"n": 0}}, {"all": part, "accepted": part}


def regress(sq: np.ndarray, nll: np.ndarray, covered: np.ndarray, level: float,
            per_request: int = 100):  # fmt: skip
    """Window figures and parts of regression rows from their per-row terms."""
    n = len(sq)
    terms = {"error": sq[:, None], "nll": nll[:, None],
             "interval_coverage": np.stack([covered, np.full(n, level)], 1)}  # fmt: skip
    figs = {"n": n, "error": math.sqrt(sq.mean()), "nll": nll.mean(),
            "interval_coverage": covered.mean(), "interval_level": level}  # fmt: skip
    part = WindowPart(None, None, terms, np.arange(n) // per_request)
    return {"all": figs, "accepted": {"n": 0}}, {"all": part, "accepted": part}


def binary(rng: np.random.Generator, n: int, error: float):
    """Two-class rows at confidence 0.8 whose labels are wrong with probability ``error``."""
    probs = np.tile([0.8, 0.2], (n, 1))
    return probs, (rng.random(n) < error).astype(np.int64)


def row(rows: list[dict], figure: str) -> dict:
    return next(r for r in rows if r["figure"] == figure and r["part"] == "all")


def test_the_error_test_is_fishers_exact_test_over_every_leave_one_request_out_window():
    rng = np.random.default_rng(0)
    probs, labels = binary(rng, 400, 0.12)
    figs, parts = classify(probs, labels)
    validation = {"error_all": 5 / 142, "moments": {"all": {"n": 142, "error": [5 / 142, 0.03]}}}
    got = row(drift_rows(figs, parts, validation, "classification", "error", 200, 0.0), "error")
    wrong = labels.astype(bool)
    windows = [np.ones(400, bool)] + [np.arange(400) // 100 != g for g in range(4)]
    want = max(stats.fisher_exact([[wrong[w].sum(), (~wrong[w]).sum()], [5, 137]],
                                  alternative="greater")[1] for w in windows)  # fmt: skip
    assert got["p_value"] == pytest.approx(want, rel=1e-9)
    assert got["test"] == "fisher" and got["basis"] == "validation moments"


def test_the_nll_test_is_the_pooled_two_sample_t_test():
    rng = np.random.default_rng(1)
    sq, nll = rng.chisquare(1, 300), rng.normal(1.1, 0.5, 300)
    figs, parts = regress(sq, nll, rng.random(300) < 0.9, 0.9)
    validation = {"nll_all": 1.0, "error_all": 1.0, "moments": {"all": {
        "n": 150, "nll": [1.0, 0.3], "error": [1.0, 2.0]}}}  # fmt: skip
    got = drift_rows(figs, parts, validation, "regression", "rmse", 200, 0.0)
    for figure, terms, (mean, var) in (("nll", nll, (1.0, 0.3)), ("error", sq, (1.0, 2.0))):
        windows = [np.ones(300, bool)] + [np.arange(300) // 100 != g for g in range(3)]
        want = max(stats.ttest_ind_from_stats(terms[w].mean(), terms[w].std(ddof=1), w.sum(),
                                              mean, math.sqrt(var), 150, equal_var=True,
                                              alternative="greater").pvalue
                   for w in windows)  # fmt: skip
        assert row(got, figure)["p_value"] == pytest.approx(want, rel=1e-6), figure


def _rate(drifting: list[bool]) -> tuple[float, float]:
    rate = float(np.mean(drifting))
    return rate, 3 * math.sqrt(rate * (1 - rate) / len(drifting)) + 1e-12


@pytest.mark.parametrize("error", [0.0, 0.03, 0.2])
def test_error_false_alarms_on_unshifted_binomial_streams_stay_at_the_level(error):
    """The baseline's 142 rows and the window's 1,000 are drawn from one error rate; 0 errors
    in the baseline (error 0.0 or by chance at 0.03) is part of the simulation."""
    rng = np.random.default_rng(2)
    level, out = 0.05, []
    for _ in range(500):
        k = rng.binomial(142, error)
        probs, labels = binary(rng, 1000, error)
        figs, parts = classify(probs, labels)
        validation = {"error_all": k / 142, "n": 142}
        r = row(drift_rows(figs, parts, validation, "classification", "error", 200, 0.0,
                           level), "error")  # fmt: skip
        out.append(r["drifting"])
    rate, _ = _rate(out)
    assert rate <= level + 3 * math.sqrt(level * (1 - level) / len(out))


def test_nll_and_coverage_false_alarms_on_unshifted_normal_streams_stay_at_the_level():
    """Per-row NLL terms skewed as a Gaussian's are (chi-square with one degree of freedom),
    coverage at the nominal level; both figures in one family at level 0.1."""
    rng = np.random.default_rng(3)
    level, out, past = 0.1, [], 0
    for _ in range(1000):
        base = 0.5 * rng.chisquare(1, 142) + 0.9
        sq = rng.chisquare(1, 1000)
        nll = 0.5 * sq + 0.9
        covered = rng.random(1000) < 0.9
        figs, parts = regress(sq, nll, covered, 0.9)
        validation = {
            "nll_all": base.mean(),
            "n": 142,
            "moments": {"all": {"n": 142, "nll": [base.mean(), base.var(ddof=1)]}},
        }
        rows = drift_rows(figs, parts, validation, "regression", "rmse", 200, 0.0, level)
        out.append(any(r["drifting"] for r in rows))
        past += row(rows, "nll")["p_value"] <= level / 2
    rate, _ = _rate(out)
    assert rate <= level + 3 * math.sqrt(level * (1 - level) / len(out))
    assert past / 1000 <= level / 2 + 3 * math.sqrt(level / 2 / 1000)  # the full-window test


def test_ece_false_alarms_on_calibrated_streams_stay_at_the_level():
    """Calibrated three-class rows (labels drawn from the served probabilities): the window's
    ECE (300 rows) against a baseline ECE of 142 such rows."""
    rng = np.random.default_rng(4)
    level, out = 0.1, []

    def rows(n: int):
        p = rng.dirichlet([4.0, 1.0, 1.0], n)
        return p, np.array([rng.choice(3, p=q) for q in p])

    for _ in range(300):
        bp, by = rows(142)
        ece = classification_figures(classification_terms(bp, by))["ece"]
        figs, parts = classify(*rows(300))
        r = row(drift_rows(figs, parts, {"ece_all": ece, "n": 142}, "classification", "error",
                           200, 0.0, level), "ece")  # fmt: skip
        out.append(r["drifting"])
    rate, _ = _rate(out)
    assert rate <= level + 3 * math.sqrt(level * (1 - level) / len(out))


def test_every_test_detects_a_real_shift():
    rng = np.random.default_rng(5)
    probs, labels = binary(rng, 600, 0.35)  # baseline 5 %: ECE 0.15, NLL 0.71
    figs, parts = classify(probs, labels)
    validation = {"error_all": 0.05, "ece_all": 0.02, "nll_all": 0.5, "n": 142}
    rows = drift_rows(figs, parts, validation, "classification", "error", 200, 0.25)
    assert {r["figure"] for r in rows if r["drifting"]} == {"error", "ece", "nll"}
    sq = rng.chisquare(1, 600) * 2.0  # RMSE 1.41 against 1.0
    figs, parts = regress(sq, 0.5 * sq + 0.9, rng.random(600) < 0.7, 0.9)
    validation = {"error_all": 1.0, "nll_all": 1.4, "n": 142}
    rows = drift_rows(figs, parts, validation, "regression", "rmse", 200, 0.25)
    assert {r["figure"] for r in rows if r["drifting"]} == {"error", "nll", "interval_coverage"}
