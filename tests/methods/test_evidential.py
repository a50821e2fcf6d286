"""Evidential models: the shared suite, the NIG and Dirichlet maths against scipy and Monte Carlo
references, the losses against the papers' formulas, and the uncertainty of the defaults."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conformance import MethodConformance, fitted_regression
from scipy import stats
from scipy.special import digamma, gammaln
from test_mcbn import regression_data

import bayesify
from bayesify.methods.core.spread import epistemic_share
from bayesify.methods.evidential.losses import (
    dirichlet_data_loss,
    evidential_regression_loss,
    kl_to_uniform,
    misleading_kl,
)
from bayesify.models import lenet, mlp
from bayesify.nn.sampled_linear import last_linear
from bayesify.options import EvidentialLoss
from bayesify.predictive.nig import nig_nll, nig_summaries, sample_nig


def blobs(n: int, seed: int = 0, spread: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """Three Gaussian classes in the first 2 of 4 features (2 of noise)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    centres = torch.tensor([[0.0, 1.5, 0, 0], [-1.3, -0.8, 0, 0], [1.3, -0.8, 0, 0]])
    return centres[y] + spread * torch.randn(n, 4, generator=g), y


class TestEvidentialRegression(MethodConformance):
    def make(self):
        return fitted_regression(bayesify.EvidentialRegression)


class TestEvidentialClassifier(MethodConformance):
    def make(self):
        x, y = blobs(200)
        method = bayesify.EvidentialClassifier(mlp(4, 3, (16,), norm=None))
        method.fit((x, y), epochs=3, batch_size=16, progress=False)
        return method, x[:20]


class TestEvidentialClassifierLeNet(MethodConformance):
    def make(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(48, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (48,), generator=g)
        method = bayesify.EvidentialClassifier(lenet(norm="batch"), evidence="relu")
        method.fit((x, y), epochs=1, batch_size=16, progress=False)
        return method, x[:6]


# ---------------------------------------------------------------------------- NIG maths


def nig_params(n: int = 5, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    gamma = torch.randn(n, generator=g, dtype=torch.float64)
    nu = 0.2 + 3 * torch.rand(n, generator=g, dtype=torch.float64)
    alpha = 3.5 + 4 * torch.rand(n, generator=g, dtype=torch.float64)
    beta = 0.1 + 2 * torch.rand(n, generator=g, dtype=torch.float64)
    return gamma, nu, alpha, beta


def student_t(gamma, nu, alpha, beta):
    a, b, v = alpha.numpy(), beta.numpy(), nu.numpy()
    return stats.t(df=2 * a, loc=gamma.numpy(), scale=np.sqrt(b * (1 + v) / (v * a)))


def test_nig_nll_is_the_student_t_log_density():
    gamma, nu, alpha, beta = nig_params()
    y = torch.linspace(-3, 3, 5, dtype=torch.float64)
    ref = -student_t(gamma, nu, alpha, beta).logpdf(y.numpy())
    np.testing.assert_allclose(nig_nll(y, gamma, nu, alpha, beta).numpy(), ref, rtol=1e-10)


def test_nig_summaries_match_the_student_t_and_the_nig_moments():
    gamma, nu, alpha, beta = nig_params()
    s = nig_summaries(gamma, nu, alpha, beta)
    t = student_t(gamma, nu, alpha, beta)
    np.testing.assert_allclose(s["variance"].numpy(), t.var(), rtol=1e-10)
    np.testing.assert_allclose(s["mean"].numpy(), t.mean(), rtol=1e-10)
    # E[sigma²] of InvGamma(alpha, beta) and Var[mu] = E[sigma²] / nu, from scipy's invgamma
    ig = stats.invgamma(a=alpha.numpy(), scale=beta.numpy())
    np.testing.assert_allclose(s["aleatoric_variance"].numpy(), ig.mean(), rtol=1e-10)
    np.testing.assert_allclose(s["epistemic_variance"].numpy(), ig.mean() / nu.numpy(), rtol=1e-10)


def test_nig_draws_make_a_mixture_that_is_the_student_t():
    """The T draws (mu_t, sigma²_t) as a Predictive: its mean, epistemic, aleatoric and total
    variance converge to the closed forms, its mixture density to scipy's Student-t."""
    gamma, nu, alpha, beta = nig_params(4)
    mu, var = sample_nig(gamma, nu, alpha, beta, 40000, torch.Generator().manual_seed(0))
    pred = bayesify.Predictive.regression(mu, var)
    s = nig_summaries(gamma, nu, alpha, beta)
    torch.testing.assert_close(pred.mean, gamma, atol=0.02, rtol=0)
    for key in ("epistemic_variance", "aleatoric_variance", "variance"):
        torch.testing.assert_close(getattr(pred, key), s[key], rtol=0.05, atol=0)
    y = gamma + torch.tensor([-1.0, -0.5, 0.3, 1.5], dtype=torch.float64)
    ref = student_t(gamma, nu, alpha, beta).logpdf(y.numpy())
    np.testing.assert_allclose(pred.log_prob(y).exp().numpy(), np.exp(ref), rtol=0.05)


def test_regression_loss_is_nll_plus_lambda_times_error_times_evidence():
    gamma, nu, alpha, beta = nig_params()
    y = torch.linspace(-2, 2, 5, dtype=torch.float64)
    ref = -student_t(gamma, nu, alpha, beta).logpdf(y.numpy()) + 0.3 * np.abs(
        y.numpy() - gamma.numpy()
    ) * (2 * nu.numpy() + alpha.numpy())
    got = evidential_regression_loss(y, gamma, nu, alpha, beta, 0.3)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10)


def set_head(method: bayesify.EvidentialRegression, raw: list[float]) -> None:
    """Constant raw head outputs ``[gamma, nu, alpha, beta]`` for every input."""
    _, _, head = last_linear(method.net)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.tensor(raw))


def inverse_softplus(v: float) -> float:
    return math.log(math.expm1(v))


def test_predict_draws_from_the_heads_nig():
    """predict's Predictive against the closed forms of the head's NIG (set by hand)."""
    method = bayesify.EvidentialRegression(mlp(3, 1, (8,), norm=None))
    nu, alpha, beta = 0.5, 5.0, 2.0
    set_head(
        method, [1.5, inverse_softplus(nu), inverse_softplus(alpha - 1), inverse_softplus(beta)]
    )
    x = torch.randn(3, 3)
    pred = method.predict(x, samples=40000, seed=0)
    forms = method.summaries(x)
    torch.testing.assert_close(forms["epistemic_variance"], torch.full((3,), 2.0 / (0.5 * 4),
                                                                       dtype=torch.float64),
                               rtol=1e-5, atol=0)  # fmt: skip
    torch.testing.assert_close(forms["aleatoric_variance"].float(), torch.full((3,), 0.5),
                               rtol=1e-5, atol=0)  # fmt: skip
    for key in ("epistemic_variance", "aleatoric_variance"):
        torch.testing.assert_close(getattr(pred, key).double(), forms[key], rtol=0.05, atol=0)
    torch.testing.assert_close(pred.mean, torch.full((3,), 1.5), atol=0.03, rtol=0)


def test_nig_head_starts_from_the_networks_own_mean():
    net = mlp(3, 1, (8,), norm=None)
    method = bayesify.EvidentialRegression(net)
    x = torch.randn(4, 3)
    with torch.no_grad():
        torch.testing.assert_close(method.net(x)[:, 0], net(x)[:, 0])


def test_regression_refuses_classification_and_wide_heads():
    with pytest.raises(ValueError, match="evidential-classification"):
        bayesify.EvidentialRegression(mlp(3, 3, (8,), norm=None), task="classification")
    with pytest.raises(ValueError, match="one output per row"):
        bayesify.EvidentialRegression(mlp(3, 2, (8,), norm=None))
    with pytest.raises(ValueError, match="coeff must be >= 0"):
        bayesify.EvidentialRegression(mlp(3, 1, (8,), norm=None), coeff=-1)


# ---------------------------------------------------------------------------- Dirichlet losses


def test_dirichlet_data_terms_are_the_expected_losses():
    """eq. 5 and eq. 4 against Monte Carlo expectations over scipy's Dirichlet draws, eq. 3
    against its formula."""
    rng = np.random.default_rng(0)
    alpha = np.array([[2.0, 1.0, 4.5], [1.2, 7.0, 1.0]])
    onehot = np.eye(3)[[2, 0]]
    draws = np.stack([rng.dirichlet(a, 200000) for a in alpha], 1)  # [S, N, C]
    a, y = torch.tensor(alpha), torch.tensor(onehot)
    mse = ((onehot - draws) ** 2).sum(-1).mean(0)
    np.testing.assert_allclose(dirichlet_data_loss(a, y, EvidentialLoss.MSE).numpy(), mse,
                               rtol=5e-3)  # fmt: skip
    ce = -(onehot * np.log(draws)).sum(-1).mean(0)
    np.testing.assert_allclose(dirichlet_data_loss(a, y, EvidentialLoss.DIGAMMA).numpy(), ce,
                               rtol=5e-3)  # fmt: skip
    log = (onehot * (np.log(alpha.sum(-1, keepdims=True)) - np.log(alpha))).sum(-1)
    np.testing.assert_allclose(dirichlet_data_loss(a, y, EvidentialLoss.LOG).numpy(), log)


def test_kl_to_uniform_against_monte_carlo():
    rng = np.random.default_rng(1)
    alpha = np.array([3.0, 1.5, 0.8, 2.0])
    draws = rng.dirichlet(alpha, 200000)
    log_q = stats.dirichlet.logpdf(draws.T, alpha)
    ref = (log_q - gammaln(4)).mean()  # log Dir(p; 1) = log Gamma(C)
    got = kl_to_uniform(torch.tensor(alpha)[None])[0].item()
    assert got == pytest.approx(ref, abs=0.02)
    assert kl_to_uniform(torch.ones(1, 4, dtype=torch.float64)).abs().item() < 1e-12


def test_misleading_kl_ignores_the_true_class():
    onehot = torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64)
    honest = torch.tensor([[1.0, 50.0, 1.0]], dtype=torch.float64)
    assert misleading_kl(honest, onehot).abs().item() < 1e-12
    misleading = torch.tensor([[1.0, 50.0, 6.0]], dtype=torch.float64)
    ref = kl_to_uniform(torch.tensor([[1.0, 1.0, 6.0]], dtype=torch.float64))
    torch.testing.assert_close(misleading_kl(misleading, onehot), ref)


def test_classifier_objective_anneals_the_kl_term():
    x, y = blobs(32)
    method = bayesify.EvidentialClassifier(mlp(4, 3, (8,), norm=None), kl_warmup=0.5)
    with torch.no_grad():
        alpha = method.concentrations(method.net(x))
        onehot = torch.nn.functional.one_hot(y, 3).to(alpha)
        data = dirichlet_data_loss(alpha, onehot, EvidentialLoss.MSE)
        kl = misleading_kl(alpha, onehot)
        for progress, weight in ((0.0, 0.0), (0.25, 0.5), (0.9, 1.0)):
            got = method.objective(x, y, progress, 32)
            torch.testing.assert_close(got, (data + weight * kl).mean())


def test_classifier_predict_mutual_information_is_the_dirichlets():
    x, y = blobs(200)
    method = bayesify.EvidentialClassifier(mlp(4, 3, (16,), norm=None))
    method.fit((x, y), epochs=5, lr=1e-2, progress=False)
    xt = torch.tensor([[0.0, 1.5, 0, 0], [0.0, 0.0, 0, 0], [3.0, 3.0, 0, 0]])
    pred = method.predict(xt, samples=40000, seed=0)
    forms = method.summaries(xt)
    torch.testing.assert_close(pred.mean.double(), forms["mean"], atol=5e-3, rtol=0)
    torch.testing.assert_close(pred.mutual_information.double(), forms["mutual_information"],
                               atol=5e-3, rtol=0.02)  # fmt: skip
    alpha = forms["alpha"]
    torch.testing.assert_close(forms["vacuity"], 3 / alpha.sum(-1))
    expected = digamma(alpha.sum(-1).numpy() + 1) - (
        forms["mean"].numpy() * digamma(alpha.numpy() + 1)
    ).sum(-1)
    np.testing.assert_allclose(forms["expected_entropy"].numpy(), expected)


def test_classifier_refuses_regression():
    with pytest.raises(ValueError, match="evidential-regression"):
        bayesify.EvidentialClassifier(mlp(2, 3, (8,), norm=None), task="regression")
    with pytest.raises(ValueError, match="kl_warmup must be in"):
        bayesify.EvidentialClassifier(mlp(2, 3, (8,), norm=None), kl_warmup=2)


# ---------------------------------------------------------------------------- uncertainty


def gap_data(n: int = 300, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """y = sin(3x) + noise 0.1 on x in [-2, -0.5] and [0.5, 2] (a gap around 0)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, generator=g) * 1.5 + 0.5
    x = torch.where(torch.rand(n, generator=g) < 0.5, -x, x)
    return x[:, None], torch.sin(3 * x) + 0.1 * torch.randn(n, generator=g)


def test_regression_default_carries_epistemic_uncertainty():
    """The default's epistemic share (Var[mu] / total = 1 / (1 + nu)) is not negligible on the
    data, in the gap or beyond it."""
    torch.manual_seed(0)
    x, y = gap_data()
    method = bayesify.EvidentialRegression(mlp(1, 1, (32, 32), norm=None))
    method.fit((x, y), epochs=60, batch_size=32, lr=3e-3, progress=False)
    for xs in (x[:50], torch.zeros(5, 1), torch.full((5, 1), 4.0)):
        pred = method.predict(xs, samples=2000, seed=0)
        assert epistemic_share(pred) > 0.05


def test_classifier_is_least_sure_between_the_classes():
    """Between two separated classes (no data there) the Dirichlet's mutual information and
    vacuity are above their values at the classes' centres."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (300,), generator=g)
    x = torch.stack([torch.where(y == 0, -2.0, 2.0), torch.zeros(300)], 1)
    x = x + 0.4 * torch.randn(300, 2, generator=g)
    method = bayesify.EvidentialClassifier(mlp(2, 2, (16,), norm=None))
    method.fit((x, y), epochs=30, lr=1e-2, progress=False)
    s = method.summaries(torch.tensor([[-2.0, 0.0], [2.0, 0.0], [0.0, 0.0]]))
    assert s["mutual_information"][2] > s["mutual_information"][:2].max()
    assert s["vacuity"][2] > s["vacuity"][:2].max()


def test_from_pretrained_keeps_the_mean_and_fine_tunes_the_head():
    """A trained regression network wrapped: its mean survives the surgery, and the default
    fine-tuning (10 epochs) lowers the NIG's validation NLL from the untrained head's."""
    x, y = regression_data()
    torch.manual_seed(0)
    det = bayesify.Deterministic(mlp(5, 1, (16,), norm=None))
    det.fit((x[:200], y[:200]), epochs=20, lr=1e-2, progress=False)
    kept = bayesify.EvidentialRegression.from_pretrained(det.net, epochs=0)
    with torch.no_grad():
        torch.testing.assert_close(kept.net(x[200:])[:, 0], det.net(x[200:])[:, 0])
        before = float(kept.nll(kept.net(x[200:]), y[200:]))
    tuned = bayesify.EvidentialRegression.from_pretrained(det.net, (x[:200], y[:200]),
                                                         progress=False)  # fmt: skip
    with torch.no_grad():
        after = float(tuned.nll(tuned.net(x[200:]), y[200:]))
    assert after < before


def test_regression_epistemic_variance_is_set_by_the_regulariser():
    """The weakness Meinert et al. (2023) report, kept visible: the same data, λ = 1 against
    λ = 0, and the epistemic variance on the training rows is several times larger."""
    x, y = gap_data()
    epistemic = []
    for coeff in (0.0, 1.0):
        torch.manual_seed(0)
        method = bayesify.EvidentialRegression(mlp(1, 1, (32, 32), norm=None), coeff=coeff)
        method.fit((x, y), epochs=40, batch_size=32, lr=3e-3, progress=False)
        epistemic.append(float(method.summaries(x)["epistemic_variance"].mean()))
    assert epistemic[1] > 3 * epistemic[0]
