"""Deferral on a score of the network's features (DDU's density, Mahalanobis): the threshold
on scores the caller computes, against brute force, and the guarantees that follow from a
score drawn without samples."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bayesify.posthoc.deferral import DeferralPolicy
from bayesify.posthoc.sampling import SamplingPolicy
from bayesify.posthoc.sequential import SequentialDecision
from bayesify.predictive import Predictive
from bayesify.predictor.guarantees import deferral_note, unheld


def _rows(n: int, seed: int) -> tuple[Predictive, torch.Tensor, torch.Tensor]:
    """A predictive, labels, and a feature score that is high where the labels are noise."""
    g = torch.Generator().manual_seed(seed)
    far = torch.rand(n, generator=g)
    logits = torch.randn(4, n, 3, generator=g).double()
    y = torch.where(far > 0.5, torch.randint(0, 3, (n,), generator=g), logits.mean(0).argmax(-1))
    return Predictive.from_logits(logits), y, (far * 10).double()


def test_a_feature_threshold_keeps_the_lowest_scores_brute_force():
    pred, y, s = _rows(500, 0)
    policy = DeferralPolicy.fit(pred, y, score="density", target_coverage=0.7, row_scores=s)
    ordered = np.sort(s.numpy())
    assert ordered[349] <= policy.threshold < ordered[350]  # the 350 lowest are kept
    defer, score = policy.decide(pred, s)
    assert torch.equal(score, s) and int((~defer).sum()) == 350
    assert policy.validation["coverage"] == pytest.approx(0.7)
    # the deferred rows are the noisy ones: the accepted error is below the overall error
    assert policy.validation["error_accepted"] < policy.validation["error_all"]


def test_a_feature_threshold_for_a_target_error_is_the_largest_accepted_set():
    pred, y, s = _rows(400, 1)
    policy = DeferralPolicy.fit(pred, y, score="mahalanobis", target_error=0.3, row_scores=s)
    wrong = (pred.predicted_class != y).double().numpy()[np.argsort(s.numpy())]
    risk = np.cumsum(wrong) / np.arange(1, len(wrong) + 1)
    k = int(np.nonzero(risk <= 0.3)[0][-1]) + 1
    assert int((~policy.decide(pred, s)[0]).sum()) == k


def test_a_feature_score_needs_its_row_scores_and_no_sequential_decision():
    pred, y, s = _rows(50, 2)
    with pytest.raises(ValueError, match="density is a score of the network's features"):
        DeferralPolicy.fit(pred, y, score="density", target_coverage=0.8)
    with pytest.raises(ValueError, match="row_scores has 49 rows, the predictive 50"):
        DeferralPolicy.fit(pred, y, score="density", target_coverage=0.8, row_scores=s[:49])
    with pytest.raises(ValueError, match="no Monte Carlo error"):
        DeferralPolicy.fit_sequential(lambda rows, have, more: pred[rows], y, score="density",
                                      target_coverage=0.8)  # fmt: skip
    with pytest.raises(ValueError, match="score must be one of"):  # a regression score set
        DeferralPolicy.fit(_regression(), torch.zeros(5), score="density", target_coverage=0.8)
    policy = DeferralPolicy.fit(pred, y, score="density", target_coverage=0.8, row_scores=s)
    bad = {**policy.to_dict(), "decision": SequentialDecision().to_dict()}
    with pytest.raises(ValueError, match="decided on one pass"):
        DeferralPolicy.from_dict(bad)
    again = DeferralPolicy.from_dict(policy.to_dict())
    assert again.feature_score and again.threshold == policy.threshold


def _regression() -> Predictive:
    return Predictive(torch.randn(4, 5).double(), task="regression")


def test_a_feature_threshold_holds_under_every_sampling_policy():
    pred, y, s = _rows(100, 3)
    feature = DeferralPolicy.fit(pred, y, score="density", target_coverage=0.8, row_scores=s)
    feature.validation["samples"] = 4
    drawn = DeferralPolicy.fit(pred, y, score="entropy", target_coverage=0.8)
    drawn.validation["samples"] = 4
    for served in (SamplingPolicy.fixed(64), SamplingPolicy.adaptive(0.01, 8, 32)):
        assert deferral_note(feature, served) is None
        assert unheld(served, None, feature) == []
        assert deferral_note(drawn, served) is not None  # a drawn score's threshold does not
