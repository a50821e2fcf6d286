"""Guarantees under the served sampling policy: conformal intervals are picked by the policy a
prediction is drawn with (and say so when none was calibrated for it), and the sequential
deferral decision answers the same rows the same way whatever the seed, at the fitted rate."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bayesify.methods import MCDropout
from bayesify.models import mlp
from bayesify.posthoc.conformal import Conformal, ConformalByPolicy, calibrate_conformal
from bayesify.posthoc.deferral import DeferralPolicy
from bayesify.posthoc.sampling import SamplingPolicy
from bayesify.posthoc.sequential import SequentialDecision
from bayesify.predictor import Predictor
from bayesify.serve.model import ServedModel

LEVEL = 0.9


@pytest.fixture(scope="module")
def regression():
    """MC dropout (p = 0.5) on y = x0 + noise: few samples give noisy means and stds, so the
    conformal quantile depends on T."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3300, 2, generator=g)
    y = x[:, 0] + 0.1 * torch.randn(3300, generator=g)
    torch.manual_seed(0)
    method = MCDropout(mlp(2, hidden=(32,), norm=None, dropout=0.5))
    method.fit((x[:200], y[:200]), val=(x[200:300], y[200:300]), epochs=10, progress=False)
    return method, (x[300:1800], y[300:1800]), (x[1800:], y[1800:].numpy())


def _coverage(predictor: Predictor, test, samples: int):
    res = predictor.predict(test[0].numpy(), samples=samples, seed=3)
    c, y = res.columns, test[1]
    return float(((c["lower"] <= y) & (y <= c["upper"])).mean()), res.warnings


def test_conformal_intervals_follow_the_served_sampling_policy(regression):
    method, cal, test = regression
    # calibrated at T = 64 only, as before: served at T = 2 the intervals lose coverage
    calibrate_conformal(method, cal, samples=64, seed=1)
    short, notes = _coverage(Predictor(method), test, 2)
    assert short < LEVEL - 0.03
    assert notes and "T=64" in notes[0] and "T=2" in notes[0]  # and the answer says so
    # calibrated under T = 2 and T = 64: each served T gets its own quantile and its coverage
    calibrate_conformal(method, cal, seed=1, policies=[SamplingPolicy.fixed(2),
                                                         SamplingPolicy.fixed(64)])  # fmt: skip
    predictor = Predictor(method)
    for t in (2, 64):
        cov, notes = _coverage(predictor, test, t)
        assert abs(cov - LEVEL) < 0.025 and notes == [], (t, cov)
    by_policy = ConformalByPolicy.from_dict(method.metadata["conformal"])
    ref = Conformal.fit(method.predict(cal[0], 2, seed=1), cal[1])
    torch.testing.assert_close(by_policy.calibrations[SamplingPolicy.fixed(2)].scores, ref.scores)
    # a policy without a calibration: the nearest with fewer samples, and a warning
    cov, notes = _coverage(predictor, test, 8)
    assert cov >= LEVEL - 0.02 and len(notes) == 1 and "not T=8: using T=2" in notes[0]
    # the server's model card names what its default policy does not guarantee
    assert ServedModel(predictor, "r", default_samples=2).card()["warnings"] == []
    assert "T=8" in ServedModel(predictor, "r", default_samples=8).card()["warnings"][0]
    card = predictor.card()["metadata"]["conformal"]  # a summary, not the raw scores
    assert card["n_scores"] == 1500 and card["policies"] == ["T=2", "T=64"]
    assert "calibrations" not in card and "scores" not in card


def _toy_classes(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = torch.bucketize(x[:, 0] + 0.5 * x[:, 1] + 0.3 * torch.randn(n, generator=g),
                        torch.tensor([-0.5, 0.5]))  # fmt: skip
    return x, y


def _flips(predictor: Predictor, x: np.ndarray, samples: int = 16) -> tuple[float, np.ndarray]:
    """Share of rows whose defer flag differs over five seeds, and each seed's deferral rate."""
    d = np.array([predictor.predict(x, samples=samples, seed=s).columns["defer"]
                  for s in range(5)])  # fmt: skip
    return float((d.min(0) != d.max(0)).mean()), d.mean(1)


def test_sequential_deferral_is_stable_where_one_draw_flips():
    torch.manual_seed(0)
    method = MCDropout(mlp(4, 3, (32,), norm=None, dropout=0.2), task="classification")
    method.fit(_toy_classes(600, 0), epochs=15, batch_size=64, lr=1e-2, progress=False)
    predictor = Predictor(method)
    (xv, yv), (xt, _) = _toy_classes(300, 1), _toy_classes(200, 2)
    single = DeferralPolicy.fit(predictor.predictive(xv.numpy(), 16, seed=0), yv, score="mi",
                                target_coverage=0.8)  # fmt: skip
    single.store(method.metadata)
    flips_single, _ = _flips(predictor, xt.numpy())
    decision = SequentialDecision(start=16, max_samples=1024)
    seq = DeferralPolicy.fit_sequential(predictor.draw(xv.numpy(), seed=0), yv, score="mi",
                                        target_coverage=0.8, decision=decision)  # fmt: skip
    assert seq.validation["coverage"] == pytest.approx(0.8, abs=1 / 300)
    seq.store(method.metadata)
    flips_seq, rates = _flips(predictor, xt.numpy())
    assert flips_single > 0.25 and flips_seq < 0.12, (flips_single, flips_seq)  # 0.355, 0.06
    assert np.abs(rates - 0.2).max() < 0.1  # the fitted rate, on 200 held-out rows
    res = predictor.predict(xt.numpy(), samples=16, seed=0)
    used = res.columns["defer_samples"]
    assert used.min() == 16 and used.max() <= 1024 and res.warnings == []
    # far rows stop at the first round; a row decided early is outside z standard errors
    assert (used == 16).mean() > 0.5
    # a server's latency cap lowers the decision's maximum: no row draws more, and the model
    # card says the flip rate is no longer the calibrated one
    assert used.max() > 64
    predictor.defer_max_samples = 64
    capped = predictor.predict(xt.numpy(), samples=16, seed=0)
    assert capped.columns["defer_samples"].max() == 64
    assert (capped.columns["defer"] == res.columns["defer"]).mean() > 0.8
    notes = predictor.guarantee_notes(SamplingPolicy.fixed(16))
    assert any("at most 64 samples per row, not the 1024" in n for n in notes), notes


def test_an_exact_mixture_holds_its_calibrations_under_every_policy():
    """A deep ensemble of plain networks has M distinct samples, drawn equally whatever T or
    adaptive sampling asks: one predictive, so the conformal calibration and the one-draw
    deferral threshold made at T = M hold under every policy, without a warning; MC dropout's
    (the fixture's) still warn (above)."""
    from bayesify.methods import DeepEnsemble

    g = torch.Generator().manual_seed(0)
    x = torch.randn(900, 2, generator=g)
    y = x[:, 0] + 0.3 * torch.randn(900, generator=g)
    torch.manual_seed(0)
    method = DeepEnsemble(mlp(2, hidden=(16,), norm=None), members=3)
    method.fit((x[:300], y[:300]), val=(x[300:400], y[300:400]), epochs=3, progress=False)
    assert method.distinct_samples() == 3
    calibrate_conformal(method, (x[400:700], y[400:700]), samples=3, seed=1)
    DeferralPolicy.fit(method.predict(x[400:700], 3, seed=1), y[400:700], score="std",
                       target_coverage=0.8).store(method.metadata)  # fmt: skip
    predictor, test = Predictor(method), x[700:].numpy()
    at_m = predictor.predict(test, samples=3, seed=0)
    policies = [SamplingPolicy.fixed(30), SamplingPolicy.fixed(2),
                SamplingPolicy.adaptive(0.01, 8, 32)]  # fmt: skip
    for policy in policies:
        assert predictor.unheld(policy) == [] and predictor.guarantee_notes(policy) == []
    for samples in (30, 2):
        res = predictor.predict(test, samples=samples, seed=5)
        assert res.warnings == []
        for col in ("lower", "upper", "defer"):
            np.testing.assert_allclose(res.columns[col], at_m.columns[col], atol=1e-5)
    assert ServedModel(predictor, "e", default_samples=30).card()["warnings"] == []
