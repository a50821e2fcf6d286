"""DDU: the shared suite on an MLP and a LeNet with batch norm, the feature density against
scikit-learn's QDA and scipy's Gaussian log densities, trained layers within the spectral bound
(the layer itself: tests/nn/test_spectral_bound.py), the density as the epistemic score on a
toy (far rows and the gap between the classes), and ``from_pretrained``."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conformance import MethodConformance, fitted_lenet
from scipy.special import logsumexp
from scipy.stats import multivariate_normal
from sklearn.discriminant_analysis import QuadraticDiscriminantAnalysis

import bayesify
from bayesify.methods.ddu.density import JITTERS, ClassDensity
from bayesify.metrics import auroc
from bayesify.models import mlp
from bayesify.nn.spectral_bound import spectral_bounds


def blobs(n: int, seed: int, centres=((-2.0, 0.0), (2.0, 0.0), (0.0, 3.0))):
    """``n`` rows around each centre (std 0.5), labelled by centre."""
    g = torch.Generator().manual_seed(seed)
    c = torch.tensor(centres)
    y = torch.arange(len(c)).repeat_interleave(n)
    return c[y] + 0.5 * torch.randn(len(y), 2, generator=g), y


class TestDDUMLP(MethodConformance):
    stochastic = False

    def make(self):
        x, y = blobs(60, 0)
        x = torch.cat([x, torch.randn(len(x), 3)], 1)  # 5 features: a 3-wide input is wrong
        method = bayesify.DDU(mlp(5, 3, (16, 16), norm=None))
        method.fit((x, y), epochs=3, batch_size=32, progress=False)
        return method, x[::9]


class TestDDUConvWithBN(MethodConformance):
    stochastic = False

    def make(self):
        return fitted_lenet(bayesify.DDU, rows=48, predict=7)


def _log_pdf(q: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """The Gaussian log density by slogdet and solve (no Cholesky): ``[N]``."""
    diff = q - mean
    maha = np.einsum("nd,nd->n", diff, np.linalg.solve(cov, diff.T).T)
    return -0.5 * (maha + np.linalg.slogdet(cov)[1] + len(mean) * np.log(2 * np.pi))


def test_density_matches_qda_and_scipy():
    """Means and priors are scikit-learn QDA's, covariances numpy's (n_c - 1, the authors'
    normalisation); the class log densities and log q(z) are scipy's Gaussian log pdfs mixed
    by the priors."""
    g = torch.Generator().manual_seed(0)
    counts = (40, 25, 60)
    z = torch.cat([torch.randn(n, 4, generator=g) @ torch.randn(4, 4, generator=g) + 3 * k
                   for k, n in enumerate(counts)]).double()  # fmt: skip
    y = torch.arange(3).repeat_interleave(torch.tensor(counts))
    density = ClassDensity(3, 4)
    density.fit(z, y)
    assert float(density.jitter) == 0.0  # well conditioned: no jitter needed
    qda = QuadraticDiscriminantAnalysis().fit(z.numpy(), y.numpy())
    np.testing.assert_allclose(density.means.numpy(), qda.means_, rtol=1e-10)
    np.testing.assert_allclose(density.log_priors.exp().numpy(), qda.priors_, rtol=1e-12)
    covs = [np.cov(z[y == k].numpy(), rowvar=False) for k in range(3)]
    chol = density.cholesky
    np.testing.assert_allclose((chol @ chol.mT).numpy(), np.stack(covs), rtol=1e-8, atol=1e-10)
    q = torch.randn(9, 4, generator=g).double() * 3
    ref = np.stack([multivariate_normal(qda.means_[k], covs[k]).logpdf(q.numpy())
                    + np.log(qda.priors_[k]) for k in range(3)], axis=1)  # fmt: skip
    np.testing.assert_allclose(density.class_log_density(q).numpy(), ref, rtol=1e-9)
    np.testing.assert_allclose(density.log_density(q).numpy(), logsumexp(ref, axis=1),
                               rtol=1e-9)  # fmt: skip


def test_jitter_is_the_smallest_that_makes_every_covariance_definite():
    """Fewer rows than features in a class: its covariance is singular; the jitter chosen is
    the first of the list (relative to the mean variance) whose Cholesky exists, and the
    densities are those at Σ_c + εI. A class without rows takes no part in q."""
    g = torch.Generator().manual_seed(1)
    z = torch.randn(30, 6, generator=g).double()
    y = torch.cat([torch.zeros(27), torch.ones(3)]).long()  # class 1: 3 rows in 6 dimensions
    density = ClassDensity(3, 6)
    density.fit(z, y)
    eps = float(density.jitter)
    covs = [np.cov(z[y == k].numpy(), rowvar=False) for k in (0, 1)]
    scale = np.mean(np.diagonal(np.stack(covs), axis1=1, axis2=2))
    tried = [j * scale for j in JITTERS]
    i = next(i for i, j in enumerate(tried) if math.isclose(j, eps, rel_tol=1e-9))
    if i > 0:  # the jitter one step smaller fails
        _, info = torch.linalg.cholesky_ex(torch.tensor(covs[1]) + tried[i - 1] * torch.eye(6))
        assert info.item() > 0
    q = torch.randn(5, 6, generator=g).double()
    ref = np.stack([_log_pdf(q.numpy(), z[y == k].mean(0).numpy(), covs[k] + eps * np.eye(6))
                    + np.log([0.9, 0.1][k]) for k in (0, 1)], 1)  # fmt: skip
    np.testing.assert_allclose(density.log_density(q).numpy(), logsumexp(ref, axis=1), rtol=1e-6)
    assert density.log_priors[2].item() == -math.inf
    density.fit(z, y, jitter=0.5)  # a floor: nothing smaller is tried
    assert float(density.jitter) == pytest.approx(0.5 * scale, rel=1e-9)


def test_trained_layers_stay_within_the_bound_and_features_within_its_lipschitz_constant():
    x, y = blobs(80, 2)
    c = 1.5
    method = bayesify.DDU(mlp(2, 3, (32, 32, 32), norm=None), coefficient=c)
    method.fit((x, y), epochs=15, batch_size=32, lr=1e-2, progress=False)
    bounded = [m for m in method.net.body.modules() if hasattr(m, "parametrizations")]
    assert len(bounded) == 3 and len(spectral_bounds(method.net)) == 3  # not the output layer
    for layer in bounded:
        norm = torch.linalg.matrix_norm(layer.weight.detach(), ord=2).item()
        raw = torch.linalg.matrix_norm(layer.parametrizations.weight.original, ord=2).item()
        assert norm <= c * 1.05 and raw > c  # trained past the bound, held at it
    # ReLU is 1-Lipschitz: ||z1 - z2|| <= c^3 ||x1 - x2|| for the penultimate features
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(200, 2, generator=g) * 3, torch.randn(200, 2, generator=g) * 3
    ratio = (method.features(a) - method.features(b)).norm(dim=1) / (a - b).norm(dim=1)
    assert ratio.max().item() <= c**3 * 1.05


def test_predict_is_the_softmax_and_the_density_the_epistemic_score():
    """Trained with the defaults on three blobs: predict gives T equal softmax samples of the
    network (no mutual information); the log density separates test rows from far rows
    (AUROC 1) and is lower in the gap between two classes than at their centres, where the
    softmax entropy alone (the aleatoric score) cannot tell a far row from a known one."""
    x, y = blobs(150, 0)
    torch.manual_seed(0)
    method = bayesify.DDU(mlp(2, 3, (64, 64), norm=None))
    method.fit((x, y), epochs=30, batch_size=32, lr=1e-2, progress=False)
    xt, yt = blobs(50, 1)
    pred = method.predict(xt, samples=5, seed=0)
    with torch.no_grad():
        ref = torch.softmax(method.net(xt), -1)
    torch.testing.assert_close(pred.samples, ref.expand(5, -1, -1), rtol=0, atol=0)
    assert pred.mutual_information.abs().max().item() < 1e-12
    assert (pred.predicted_class == yt).double().mean() > 0.95
    angle = torch.linspace(0, 2 * math.pi, 40)
    far = 12 * torch.stack([angle.cos(), angle.sin()], 1)  # a ring far from every blob
    d_in, d_far = method.density_score(xt), method.density_score(far)
    assert d_in.shape == (150,) and d_in.dtype == torch.float64
    assert auroc(-d_in, -d_far) == 1.0
    gap = method.density_score(torch.tensor([[0.0, 0.0]]))  # halfway between blobs 0 and 1
    centres = method.density_score(torch.tensor([[-2.0, 0.0], [2.0, 0.0]]))
    assert gap.item() < centres.min().item() - 5
    # the softmax is confident far away (entropy below the test rows' median) for some rows
    far_entropy = method.predict(far, samples=1).entropy
    assert (far_entropy < pred.entropy.median()).any()


def test_from_pretrained_fits_the_density_on_the_callers_network():
    x, y = blobs(80, 0)
    torch.manual_seed(0)
    net = mlp(2, 3, (16,), norm=None)
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    for _ in range(100):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    before = copy.deepcopy(net.state_dict())
    method = bayesify.DDU.from_pretrained(net, (x, y))
    assert not method.config.spectral_norm and not spectral_bounds(method.net)
    for k, v in before.items():
        assert torch.equal(net.state_dict()[k], v), k
    with torch.no_grad():
        z = net[:-1](x).double()
        torch.testing.assert_close(method.predict(x, samples=2).samples[0],
                                   torch.softmax(net(x), -1))  # fmt: skip
    ref = ClassDensity(3, 16)
    ref.fit(z, y, method.config.jitter)
    torch.testing.assert_close(method.density_score(x[:10]), ref.log_density(z[:10]))
    with pytest.raises(ValueError, match="needs training data"):
        bayesify.DDU.from_pretrained(net)
    with pytest.raises(ValueError, match="fine-tune it"):
        bayesify.DDU.from_pretrained(net, (x, y), spectral_norm=True)
    tuned = bayesify.DDU.from_pretrained(net, (x, y), spectral_norm=True, epochs=2, batch_size=32)
    assert len(spectral_bounds(tuned.net)) == 1 and bool(tuned.density.fitted)


def test_bad_options_and_regression_are_one_line_errors():
    with pytest.raises(ValueError, match="DDU is a classification method"):
        bayesify.DDU(mlp(2), task="regression")
    with pytest.raises(ValueError, match="coefficient must be > 0"):
        bayesify.DDU(mlp(2, 2), coefficient=0)
    with pytest.raises(ValueError, match="nn.Linear output layer"):
        bayesify.DDU(torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten()))
    method = bayesify.DDU(mlp(2, 2))
    with pytest.raises(RuntimeError, match="not fitted"):
        method.density_score(torch.zeros(3, 2))


def test_bound_layers_leave_a_bundle_round_trip_exact(tmp_path):
    x, y = blobs(30, 0)
    method = bayesify.DDU(mlp(2, 3, (8,), norm=None)).fit((x, y), epochs=2, progress=False)
    method.save(tmp_path / "b")
    loaded = bayesify.load(tmp_path / "b")
    torch.testing.assert_close(loaded.density_score(x), method.density_score(x), rtol=0, atol=0)
    assert float(loaded.density.jitter) == float(method.density.jitter)
