"""Drift at its edges: a baseline of 0 errors, windows too small or of one request, bundles
without validation moments, the level shared by a model's figures; and the moments a deferral
policy records, against numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bayesify.posthoc.deferral import DeferralPolicy
from bayesify.predictive import Predictive, Task
from bayesify.serve.drift import ASSUMED, MOMENTS, POOLED, drift_rows
from tests.serve.test_drift import binary, classify, row

ZERO = {"error_all": 0.0, "moments": {"all": {"n": 142, "error": [0.0, 0.0]}}}


def _error(labels_wrong: int, n: int = 1000, validation: dict | None = None, **kw) -> dict:
    probs = np.tile([0.8, 0.2], (n, 1))
    labels = np.zeros(n, np.int64)
    labels[np.linspace(0, n - 1, labels_wrong).astype(int)] = 1  # spread over the requests
    figs, parts = classify(probs, labels, kw.pop("per_request", 100))
    rows = drift_rows(figs, parts, validation or ZERO, "classification", "error", 200, 0.0, **kw)
    return row(rows, "error")


def test_a_baseline_of_zero_errors_is_a_count_not_a_wall():
    got = _error(10)  # 1 % errors against 0 of 142: what the old rule called drift
    assert got["live"] == pytest.approx(0.01) and not got["drifting"] and got["p_value"] > 0.2
    assert _error(80)["drifting"]  # 8 % against 0 of 142


def test_small_windows_and_single_requests_never_drift():
    assert _error(100, n=150)["p_value"] is None  # below min_count (200)
    one = _error(1000, n=250, per_request=250)  # every row wrong, but one request
    assert one["p_value"] is None and not one["drifting"]
    two = _error(500, n=500, per_request=250)  # two requests: each alone leaves 250 rows
    assert two["drifting"]


def test_bundles_without_moments_use_their_row_count_and_say_so():
    old = {"n": 142, "coverage": 0.5, "error_all": 0.05, "error_accepted": 0.02}
    assert _error(90, validation=old)["basis"] == POOLED
    assert _error(90, validation=ZERO)["basis"] == MOMENTS
    bare = _error(90, validation={"error_all": 0.05})
    assert bare["basis"] == ASSUMED and "100 rows assumed" in bare["basis"]
    # the assumed 100 rows are noisier than 1000 known ones: a larger p for the same counts
    many = _error(90, validation={"error_all": 0.05, "n": 1000})
    assert bare["p_value"] > many["p_value"]


def test_the_level_is_shared_by_the_models_figures():
    rng = np.random.default_rng(0)
    figs, parts = classify(*binary(rng, 400, 0.1))
    validation = {"error_all": 0.1, "nll_all": 0.5, "ece_all": 0.02, "n": 142}
    rows = drift_rows(figs, parts, validation, "classification", "error", 200, 0.0, 0.03)
    assert [r["level"] for r in rows] == pytest.approx([0.01] * 3)
    with pytest.raises(ValueError, match="drift level"):
        drift_rows(figs, parts, validation, "classification", "error", 200, 0.0, 0.0)


def test_the_old_call_still_works_at_the_default_level():
    figs, parts = classify(*binary(np.random.default_rng(1), 400, 0.1))
    rows = drift_rows(figs, parts, ZERO, "classification", "error", 200, 0.25)
    assert rows[0]["level"] == 0.01


def test_a_policy_records_the_moments_of_its_validation_rows():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(16, 200, 3, generator=g) * 2  # [T, N, C]
    pred = Predictive(logits.softmax(-1), Task.CLASSIFICATION)
    y = torch.randint(0, 3, (200,), generator=g)
    policy = DeferralPolicy.fit(pred, y, target_coverage=0.8)
    mom = policy.validation["moments"]
    p = pred.mean.double().numpy()
    wrong = (p.argmax(1) != y.numpy()).astype(float)
    nll = -np.log(p[np.arange(200), y.numpy()])
    keep = ~policy.decide(pred)[0].numpy()
    for part, mask in (("all", np.ones(200, bool)), ("accepted", keep)):
        assert mom[part]["n"] == mask.sum()
        assert mom[part]["error"] == pytest.approx([wrong[mask].mean(), wrong[mask].var(ddof=1)])
        assert mom[part]["nll"] == pytest.approx([nll[mask].mean(), nll[mask].var(ddof=1)],
                                                 rel=1e-6)  # fmt: skip
    assert policy.validation["nll_all"] == pytest.approx(nll.mean(), rel=1e-6)
    assert DeferralPolicy.from_dict(policy.to_dict()).validation["moments"] == mom
