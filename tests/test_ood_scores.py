"""OOD scores by name: the predictive's scores against NumPy/SciPy on the raw logits, the
logits kept through slicing, devices and joins, the Mahalanobis fit against scikit-learn, and
the method-level scores."""

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from scipy.stats import entropy as scipy_entropy
from sklearn.covariance import EmpiricalCovariance
from torch import nn

import bayesify
from bayesify.methods.core.adaptive import predict_adaptive
from bayesify.posthoc.mahalanobis import MahalanobisFit
from bayesify.posthoc.sequential import _cat, sample_subset
from bayesify.predictive import Predictive
from bayesify.predictive.ood import OOD_SCORES, PREDICTIVE_SCORES


def _logits(t=6, n=5, c=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(t, n, c, generator=g, dtype=torch.float64) * 4 + 2


def test_logit_scores_match_scipy_on_the_raw_logits():
    logits = _logits()
    pred = Predictive.from_logits(logits)
    raw = logits.numpy()
    energy = -logsumexp(raw, axis=-1).mean(0)  # Liu et al.: E = -logsumexp, T = 1
    np.testing.assert_allclose(pred.ood_score("energy").numpy(), energy, rtol=1e-5)
    np.testing.assert_allclose(pred.ood_score("max_logit").numpy(), -raw.max(-1).mean(0),
                               rtol=1e-6)  # fmt: skip
    np.testing.assert_allclose(pred.logits.numpy(), raw, atol=1e-5)


def test_probability_scores_match_numpy():
    pred = Predictive.from_logits(_logits())
    p = pred.samples.double().numpy()  # [T, N, C]
    mean = p.mean(0)
    np.testing.assert_allclose(pred.ood_score("max_prob").numpy(), 1 - mean.max(-1), rtol=1e-6)
    total = scipy_entropy(mean, axis=-1)
    np.testing.assert_allclose(pred.ood_score("entropy").numpy(), total, rtol=1e-5)
    mi = total - scipy_entropy(p, axis=-1).mean(0)
    np.testing.assert_allclose(pred.ood_score("mutual_information").numpy(), mi, atol=1e-6)
    for name in PREDICTIVE_SCORES:
        assert pred.ood_score(name).dtype == torch.float64


def test_energy_scores_far_apart_logits_exactly():
    # a logit gap of 200 underflows the small class's float32 probability to 0; max_logit and
    # energy stay exact (they need only the largest logit and its probability)
    logits = torch.tensor([[[200.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)
    pred = Predictive.from_logits(logits)
    expected = -logsumexp(logits.numpy(), axis=-1).mean(0)
    np.testing.assert_allclose(pred.ood_score("energy").numpy(), expected, rtol=1e-6)


def test_logits_kept_through_slicing_devices_and_joins():
    logits = _logits(t=4, n=6)
    pred = Predictive.from_logits(logits)
    idx = torch.tensor([4, 0, 2])
    np.testing.assert_allclose(pred[idx].logits.numpy(), logits[:, idx].numpy(), atol=1e-5)
    np.testing.assert_allclose(pred[1:3].ood_score("energy"), pred.ood_score("energy")[1:3])
    assert pred.to("cpu").max_logits is not None
    sub = sample_subset(pred, torch.tensor([0, 2]))
    np.testing.assert_allclose(sub.logits.numpy(), logits[[0, 2]].numpy(), atol=1e-5)
    rows = _cat(pred[:2], pred[2:], 1)
    np.testing.assert_allclose(rows.ood_score("energy"), pred.ood_score("energy"))
    samples = _cat(sample_subset(pred, torch.arange(2)), sample_subset(pred, torch.arange(2, 4)), 0)
    np.testing.assert_allclose(samples.ood_score("max_logit"), pred.ood_score("max_logit"))


def test_probabilities_without_logits_say_so():
    pred = Predictive.classification(torch.full((3, 2, 4), 0.25))
    assert pred.max_logits is None
    for name in ("max_logit", "energy"):
        with pytest.raises(ValueError, match="has none"):
            pred.ood_score(name)
    with pytest.raises(ValueError, match="no logits"):
        _ = pred.logits
    with pytest.raises(ValueError, match="unknown OOD score 'nope'; valid: max_prob"):
        pred.ood_score("nope")
    with pytest.raises(ValueError, match="ood_scores"):
        pred.ood_score("mahalanobis")
    with pytest.raises(ValueError, match="classification"):
        Predictive.regression(torch.zeros(2, 3), 1.0).ood_score("entropy")


def test_mahalanobis_matches_sklearn_empirical_covariance():
    g = torch.Generator().manual_seed(1)
    h = torch.randn(90, 3, generator=g, dtype=torch.float64) @ torch.tensor(
        [[1.0, 0.5, 0.0], [0.0, 1.0, 0.3], [0.0, 0.0, 2.0]], dtype=torch.float64
    )
    y = torch.arange(90) % 3
    h = h + 3.0 * torch.nn.functional.one_hot(y, 3).double()
    fit = MahalanobisFit.fit(h, y)
    hn, yn = h.numpy(), y.numpy()
    means = np.stack([hn[yn == c].mean(0) for c in range(3)])
    cov = EmpiricalCovariance(assume_centered=True).fit(hn - means[yn])  # Lee et al.'s fit
    q = np.random.default_rng(0).normal(size=(7, 3)) * 3
    expected = np.stack([cov.mahalanobis(q - means[c]) for c in range(3)], 1)  # squared
    np.testing.assert_allclose(fit.distances(torch.tensor(q)).numpy(), expected, rtol=1e-8)
    np.testing.assert_allclose(fit.score(torch.tensor(q)).numpy(), expected.min(1), rtol=1e-8)
    back = MahalanobisFit.from_dict(fit.to_dict())
    np.testing.assert_allclose(back.score(torch.tensor(q)), fit.score(torch.tensor(q)))
    with pytest.raises(ValueError, match="none for \\[1\\]"):
        MahalanobisFit.fit(h[:2], torch.tensor([0, 2]))


def _trained(cls=bayesify.Deterministic, seed=0, **kw):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3))
    x = torch.randn(60, 3)
    y = (x[:, 0] > 0.3).long() + (x[:, 1] > 0.5).long()
    m = cls(net, task="classification", **kw)
    m.fit((x, y), epochs=2, batch_size=20, progress=False)
    return m, x, y


def test_fit_mahalanobis_on_a_method_uses_its_penultimate_features(tmp_path):
    m, x, y = _trained()
    fit = bayesify.fit_mahalanobis(m, x, y)
    with torch.no_grad():
        h = m.net[:-1](x).double()  # the last linear's inputs, computed without the hook
    np.testing.assert_allclose(fit.means[1].numpy(), h[y == 1].mean(0).numpy(), rtol=1e-5)
    scores = bayesify.ood_scores(m, x[:4], ["mahalanobis", "energy"], samples=1)
    np.testing.assert_allclose(scores["mahalanobis"], fit.score(h[:4]), rtol=1e-6)
    m.save(tmp_path / "b")
    back = bayesify.load(tmp_path / "b")
    again = bayesify.ood_scores(back, x[:4], ["mahalanobis"], samples=1)
    np.testing.assert_allclose(again["mahalanobis"], scores["mahalanobis"], rtol=1e-6)


def test_features_are_the_output_layers_inputs_whatever_its_kind():
    # Bayes by Backprop's output layer is its own Bayesian linear layer, not an nn.Linear
    m, x, y = _trained(bayesify.BayesByBackprop)
    assert not isinstance(m.net[-1], nn.Linear)
    fit = bayesify.fit_mahalanobis(m, x, y)
    with torch.no_grad():
        h = m.net[:-1](x).double()
    np.testing.assert_allclose(fit.means[0].numpy(), h[y == 0].mean(0).numpy(), rtol=1e-5)


def test_a_last_layer_laplace_scores_its_networks_penultimate_features():
    # its output layer replaced, the last nn.Linear left is the first hidden layer
    det, x, y = _trained()
    laplace = bayesify.Laplace.from_pretrained(det.net, (x, y), task="classification")
    ref = bayesify.fit_mahalanobis(det, x, y)
    fit = bayesify.fit_mahalanobis(laplace, x, y)
    np.testing.assert_allclose(fit.means.numpy(), ref.means.numpy(), rtol=1e-6)


def test_method_scores_by_name_and_their_errors():
    m, x, _ = _trained()
    pred = m.predict(x[:5], samples=1)
    assert set(bayesify.ood_scores(m, x[:5], pred=pred)) == set(PREDICTIVE_SCORES)
    with pytest.raises(ValueError, match="Deterministic has no Mahalanobis fit"):
        bayesify.ood_scores(m, x[:5], ["mahalanobis"], pred=pred)
    with pytest.raises(ValueError, match="density: Deterministic has no fitted feature density"):
        bayesify.ood_scores(m, x[:5], ["density"], pred=pred)
    probs = Predictive.classification(pred.samples)
    with pytest.raises(ValueError, match="energy: Deterministic gives class probabilities"):
        bayesify.ood_scores(m, x[:5], ["energy"], pred=probs)


def test_density_score_is_minus_the_methods_log_density():
    m, x, _ = _trained()
    m.density_score = lambda rows: -(rows**2).sum(-1)  # a method's fitted log density [N]
    scores = bayesify.ood_scores(m, x[:4], samples=1)
    assert "density" in scores and set(OOD_SCORES) - set(scores) == {"mahalanobis"}
    np.testing.assert_allclose(scores["density"], (x[:4].double() ** 2).sum(-1), rtol=1e-6)


def test_adaptive_sampling_keeps_the_logits():
    m, x, _ = _trained(bayesify.MCDropout, dropout=0.3)
    pred = predict_adaptive(m, x[:6], tol=0.0, start=2, max_samples=4, seed=0)
    g = torch.Generator().manual_seed(0)  # the two rounds' draws (tol 0: every row doubles)
    raw = torch.cat([m.sample(x[:6], 2, generator=g), m.sample(x[:6], 2, generator=g)])
    energy = -logsumexp(raw.double().numpy(), axis=-1).mean(0)
    np.testing.assert_allclose(pred.ood_score("energy").numpy(), energy, rtol=1e-5)


def test_a_dirichlet_student_has_no_logits_and_says_so():
    torch.manual_seed(0)
    x = torch.randn(80, 4)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 3))
    teacher = bayesify.MCDropout(net, task="classification")
    teacher.fit((x, y), epochs=2, progress=False)
    student = bayesify.distill(teacher, x, epochs=1, samples=4, progress=False)
    pred = student.predict(x[:5], samples=4, seed=0)
    assert pred.max_logits is None  # its samples are Dirichlet draws of probabilities
    scores = bayesify.ood_scores(student, x[:5], pred=pred)
    assert set(scores) == {"max_prob", "entropy", "mutual_information"}
    with pytest.raises(ValueError, match="^energy: Distilled gives class probabilities"):
        bayesify.ood_scores(student, x[:5], ["energy"], pred=pred)


def test_an_int8_served_network_is_scored_on_the_same_features():
    """``serve --int8`` quantises the linear layers, whose packed weights are not parameters:
    the Mahalanobis features are still the output layer's inputs (the batch norm before it was
    taken for the output layer once, a silently wrong score)."""
    from bayesify.methods.core.quantize import quantize_int8
    from bayesify.models import mlp
    from bayesify.nn.features import output_layer, penultimate_features

    torch.manual_seed(0)
    x, y = torch.randn(300, 4), torch.randint(0, 2, (300,))
    method = bayesify.MCDropout(mlp(4, 2, (16,), dropout=0.2), task="classification")
    method.fit((x, y), epochs=2, progress=False)
    before = penultimate_features(method.net, x)
    quantize_int8(method)
    head = output_layer(method.net, x[:2])
    assert type(head).__name__ == "Linear" and "quantized" in type(head).__module__
    # the output layer's inputs come before any int8 layer here (one hidden layer, then batch
    # norm, ReLU and dropout): the same numbers up to the first layer's int8 rounding
    torch.testing.assert_close(penultimate_features(method.net, x), before, rtol=0.05, atol=0.05)
