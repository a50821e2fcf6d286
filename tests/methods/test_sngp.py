"""SNGP: the shared suite (sampled and mean-field, MLP and a conv net), the random features'
kernel against the RBF closed form, the Laplace covariance against kernel ridge regression in
data space, the sampled and mean-field logits against their moments, the objective, the spread
of the default on a toy with a gap, and ``from_pretrained``."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conformance import MethodConformance, fitted_lenet
from test_mcbn import regression_data

import bayesify
from bayesify.methods.core.spread import epistemic_share
from bayesify.models import mlp
from bayesify.nn import sampling
from bayesify.nn.random_feature_gp import RandomFeatureGP
from bayesify.nn.spectral_bound import spectral_bounds


def blobs(n: int = 200, seed: int = 0, d: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Two classes around (-2, 0, ...) and (2, 0, ...) in ``d`` dimensions: a gap between them
    and nothing far away."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    x = 0.5 * torch.randn(n, d, generator=g)
    x[:, 0] += 4 * y - 2
    return x, y


class TestSNGPClassification(MethodConformance):
    def make(self):
        x, y = blobs(d=4)
        method = bayesify.SNGP(mlp(4, 2, (16, 16), norm=None), task="classification",
                               num_features=64)  # fmt: skip
        method.fit((x, y), epochs=3, batch_size=32, progress=False)
        return method, x[:20]


class TestSNGPRegression(MethodConformance):
    def make(self):
        x, y = regression_data()
        method = bayesify.SNGP(mlp(5, 1, (16, 16), norm=None), num_features=64)
        method.fit(
            (x[:200], y[:200]), val=(x[200:], y[200:]), epochs=3, batch_size=16, progress=False
        )
        return method, x[200:230]


class TestSNGPMeanFieldConvWithBN(MethodConformance):
    stochastic = False  # the mean-field logits: every sample the same

    def make(self):
        return fitted_lenet(bayesify.SNGP, rows=48, predict=8, num_features=128,
                            prediction="mean-field")  # fmt: skip


def test_random_features_approximate_the_rbf_kernel():
    """φ(a)·φ(b) → exp(-‖a - b‖² / (2ℓ²)) (Rahimi & Recht), with M = 20000 features."""
    gp = RandomFeatureGP(3, 1, 20000, lengthscale=1.5, generator=torch.Generator().manual_seed(0))
    a, b = torch.randn(6, 3), torch.randn(6, 3)
    approx = gp.features(a) @ gp.features(b).t()
    d2 = ((a[:, None] - b[None]) ** 2).sum(-1)
    torch.testing.assert_close(approx, torch.exp(-d2 / (2 * 1.5**2)), rtol=0, atol=0.03)


def _features_numpy(gp: RandomFeatureGP, h: np.ndarray) -> np.ndarray:
    w, b = gp.feature_weight.double().numpy(), gp.feature_bias.double().numpy()
    return np.sqrt(2.0 / gp.num_features) * np.cos(h @ w.T + b)


def _body(method, x):
    """The GP layer's inputs for ``x``, by running the body's modules up to it."""
    h = x
    for module in method.net:
        if module is method.head:
            return h
        h = module(h)
    raise AssertionError("no GP layer")


@pytest.mark.parametrize("ridge", [1.0, 0.3])
def test_regression_gp_variance_is_kernel_ridge_regression_in_data_space(ridge):
    """With unit row weights the covariance ``s(sI + ΦᵀΦ)⁻¹`` gives at a new row the kernel
    ridge variance ``k** - k*ᵀ(K + sI)⁻¹k*`` of the random-feature kernel (Woodbury),
    computed here in data space with NumPy."""
    x, y = regression_data(n=120)
    method = bayesify.SNGP(mlp(5, 1, (16,), norm=None), num_features=48, ridge=ridge)
    method.fit((x[:100], y[:100]), epochs=2, batch_size=20, progress=False)
    with torch.no_grad():
        h_train = _body(method.net.eval() and method, x[:100]).double().numpy()
        h_new = _body(method, x[100:]).double().numpy()
    phi, phi_new = _features_numpy(method.head, h_train), _features_numpy(method.head, h_new)
    k = phi @ phi.T
    k_star = phi @ phi_new.T
    expected = (phi_new**2).sum(1) - np.einsum(
        "in,in->n", k_star, np.linalg.solve(k + ridge * np.eye(len(k)), k_star)
    )
    got = method.gp_variance(x[100:]).double().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


def test_classification_precision_weights_rows_by_p_times_one_minus_p():
    x, y = blobs(60)
    method = bayesify.SNGP(mlp(2, 3, (8,), norm=None), task="classification", num_features=32,
                           cov_weighting="logistic")  # fmt: skip
    method.fit((x, y), epochs=2, batch_size=20, progress=False)
    method.net.train()
    method.net[0].eval()  # a mix of modes, left as it was
    modes = [m.training for m in method.net.modules()]
    precision = method.fit_covariance((x, y), batch_size=7)
    assert [m.training for m in method.net.modules()] == modes
    with torch.no_grad():
        h = _body(method.net.eval() and method, x).double().numpy()
    phi = _features_numpy(method.head, h)
    logits = phi @ method.head.beta.detach().double().numpy().T
    p = np.exp(logits - logits.max(1, keepdims=True))
    p = (p / p.sum(1, keepdims=True)).max(1)
    expected = np.eye(32) + (phi * (p * (1 - p))[:, None]).T @ phi
    np.testing.assert_allclose(precision.numpy(), expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(method.head.covariance.double().numpy(), np.linalg.inv(expected),
                               rtol=1e-4, atol=1e-6)  # fmt: skip
    moving = bayesify.SNGP(mlp(2, 3, (8,), norm=None), task="classification", num_features=32,
                           cov_momentum=0.9, cov_weighting="logistic")  # fmt: skip
    moving.net.load_state_dict(method.net.state_dict())
    reference = np.eye(32)
    for i in range(0, 60, 7):  # edward2's moving average of per-batch mean precisions
        f, q = phi[i : i + 7], p[i : i + 7]
        reference = 0.9 * reference + 0.1 * (f * (q * (1 - q))[:, None]).T @ f / len(f)
    np.testing.assert_allclose(moving.fit_covariance((x, y), batch_size=7).numpy(), reference,
                               rtol=1e-6, atol=1e-7)  # fmt: skip


def test_sampled_and_mean_field_logits_follow_the_moments():
    gp = RandomFeatureGP(4, 3, 64, generator=torch.Generator().manual_seed(0))
    gp.covariance.copy_(0.5 * torch.eye(64))
    h = torch.randn(5, 4)
    mean, var = gp.moments(h)
    with torch.no_grad(), sampling(gp, 4000, torch.Generator().manual_seed(0)):
        draws = gp(h.repeat(4000, 1)).reshape(4000, 5, 3)
    torch.testing.assert_close(draws.mean(0), mean, rtol=0, atol=4 * (var.max() / 4000) ** 0.5)
    torch.testing.assert_close(draws.var(0), var[:, None].expand(5, 3), rtol=0.1, atol=0)
    gp.mean_field = True
    with torch.no_grad(), sampling(gp, 2):
        mf = gp(h.repeat(2, 1)).reshape(2, 5, 3)
    expected = mean / torch.sqrt(1 + math.pi / 8 * var)[:, None]
    torch.testing.assert_close(mf, expected.expand(2, 5, 3))
    torch.testing.assert_close(gp(h), mean)  # outside a sampling block: the posterior mean


def test_objective_is_the_data_term_plus_the_prior_on_beta():
    x, y = blobs(10)
    method = bayesify.SNGP(mlp(2, 2, (8,), norm=None), task="classification", num_features=16)
    with torch.no_grad():
        loss = method.objective(x, y, 0.0, 50)
        logits = method.net(x)
    beta = method.head.beta.detach()
    torch.testing.assert_close(loss, F.cross_entropy(logits, y) + beta.square().sum() / 100)


def test_the_default_carries_uncertainty_far_from_the_data_and_in_the_gap():
    """Trained with the defaults on two separated blobs, the logits' draws disagree more in
    the gap between them and far away than on the blobs, by GP variance and by mutual
    information, and the predictive's epistemic share there is not negligible (on the blobs
    it is small by design: no spread warning is raised for SNGP)."""
    x, y = blobs(400)
    torch.manual_seed(0)
    method = bayesify.SNGP(mlp(2, 2, (64, 64), norm=None), task="classification")
    method.fit((x[:300], y[:300]), val=(x[300:], y[300:]), epochs=20, batch_size=32, lr=1e-2,
               progress=False)  # fmt: skip
    acc = (method.predict(x[300:], samples=50, seed=0).mean.argmax(-1) == y[300:]).float()
    assert acc.mean() > 0.95
    on = x[300:]
    gap = torch.tensor([[0.0, 0.0], [0.0, 0.5], [0.0, -0.5]])
    far = torch.tensor([[0.0, 6.0], [8.0, 8.0], [-6.0, -6.0]])
    v_on, v_gap, v_far = (method.gp_variance(z) for z in (on, gap, far))
    assert v_gap.min() > 3 * v_on.mean() and v_far.min() > 10 * v_on.mean()
    mi = [method.predict(z, samples=400, seed=0).mutual_information.mean() for z in (on, gap, far)]
    assert mi[1] > 10 * mi[0] and mi[2] > 10 * mi[0]
    assert epistemic_share(method.predict(gap, samples=400, seed=0)) > 0.02
    assert epistemic_share(method.predict(far, samples=400, seed=0)) > 0.05


def test_from_pretrained_keeps_the_body_and_fits_the_gp_layer():
    x, y = blobs(300)
    torch.manual_seed(0)
    net = mlp(2, 2, (32, 32), norm=None)
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    for _ in range(100):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    with torch.no_grad():  # a body layer well above the bound: from_pretrained must not shrink it
        net[0].weight.mul_(5)
    before = copy.deepcopy(net.state_dict())
    method = bayesify.SNGP.from_pretrained(net, (x, y), task="classification", epochs=10)
    for k, v in before.items():
        assert torch.equal(net.state_dict()[k], v), k  # the caller's network
    with torch.no_grad():
        body = net[:-1](x[:10])
        torch.testing.assert_close(_body(method.net.eval() and method, x[:10]), body)
    pred = method.predict(x, samples=50, seed=0)
    assert (pred.mean.argmax(-1) == y).float().mean() > 0.95
    far = method.gp_variance(torch.tensor([[0.0, 30.0], [0.0, 0.0]]))
    assert far.min().item() > 2 * method.gp_variance(x).mean().item()
    with pytest.raises(ValueError, match="fits the GP output layer on train"):
        bayesify.SNGP.from_pretrained(net, task="classification")


def test_bad_options_are_one_line_errors():
    with pytest.raises(ValueError, match="spec_norm_bound must be > 0"):
        bayesify.SNGP(mlp(2), spec_norm_bound=0)
    with pytest.raises(ValueError, match="cov_momentum must be in"):
        bayesify.SNGP(mlp(2), cov_momentum=1.0)
    with pytest.raises(ValueError, match="mean-field' is a classification option"):
        bayesify.SNGP(mlp(2), prediction="mean-field")
    with pytest.raises(ValueError, match="prediction"):
        bayesify.SNGP(mlp(2), task="classification", prediction="laplace")
    with pytest.raises(ValueError, match="homoscedastic"):
        bayesify.SNGP(mlp(2, 2), likelihood="heteroscedastic")
    with pytest.raises(ValueError, match="nn.Linear output layer"):
        bayesify.SNGP(torch.nn.Sequential(torch.nn.ReLU()))


def test_the_paper_preset_is_mean_field_with_the_authors_bound():
    m = bayesify.SNGP(mlp(2, 2, (8,), norm=None), task="classification", preset="paper")
    cfg = m.config
    assert cfg.prediction == "mean-field" and cfg.spec_norm_bound == 6.0
    assert cfg.num_features == 1024 and cfg.mean_field_factor == pytest.approx(math.pi / 8)
    assert all(layer.bound.item() == 6.0 for layer in spectral_bounds(m.net))
