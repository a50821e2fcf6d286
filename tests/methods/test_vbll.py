"""VBLL: the shared suite; the layer's moments against its explicit covariance; the KL against
torch.distributions; the training bounds against Monte Carlo estimates of the same expectations;
the predictive against the closed form; the spread of the default; ``from_pretrained``."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from conformance import MethodConformance, fitted_lenet, fitted_regression
from test_mcbn import regression_data
from torch.distributions import MultivariateNormal, kl_divergence

import bayesify
from bayesify.methods.core.sampling import Sampling
from bayesify.methods.core.spread import NegligibleSpreadWarning, epistemic_share
from bayesify.methods.vbll.bounds import jensen_bound, regression_bound, wishart_term
from bayesify.models import mlp
from bayesify.nn import sampling
from bayesify.nn.vbll import VBLLLinear


class TestVBLLRegression(MethodConformance):
    def make(self):
        return fitted_regression(bayesify.VBLL)


class TestVBLLConvClassificationWithBN(MethodConformance):
    def make(self):
        return fitted_lenet(bayesify.VBLL, covariance="lowrank")


def random_layer(covariance: str, n_in: int = 4, n_out: int = 3, seed: int = 0) -> VBLLLinear:
    """A VBLL layer with every parameter drawn at random (off-diagonals included)."""
    torch.manual_seed(seed)
    layer = VBLLLinear(torch.nn.Linear(n_in, n_out), covariance, rank=2).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(0.5 * torch.randn_like(p))
    return layer


@pytest.mark.parametrize("covariance", ["dense", "diagonal", "lowrank"])
def test_moments_and_kl_against_the_explicit_covariance(covariance):
    layer = random_layer(covariance)
    s = layer.covariance_matrix()  # [out, D, D]
    phi = torch.randn(6, 4, dtype=torch.float64)
    phi_aug = torch.cat([phi, torch.ones(6, 1, dtype=torch.float64)], 1)
    quad = torch.einsum("ni,kij,nj->nk", phi_aug, s, phi_aug)
    torch.testing.assert_close(layer.quadratic(phi_aug), quad)
    torch.testing.assert_close(layer.trace(), torch.diagonal(s, dim1=1, dim2=2).sum(-1))
    torch.testing.assert_close(layer.logdet(), torch.logdet(s))
    prior_var = 0.7
    q = MultivariateNormal(layer.mean(), covariance_matrix=s)
    p = MultivariateNormal(torch.zeros_like(layer.mean()), prior_var * torch.eye(5).double())
    torch.testing.assert_close(layer.kl(prior_var), kl_divergence(q, p).sum())


@pytest.mark.parametrize("covariance", ["dense", "lowrank"])
def test_draws_have_the_posterior_mean_and_covariance(covariance):
    layer = random_layer(covariance)
    w, b = layer.draw(100_000, torch.Generator().manual_seed(0))
    full = torch.cat([w, b[..., None]], -1)  # [G, out, D]
    torch.testing.assert_close(full.mean(0), layer.mean().detach(), atol=0.02, rtol=0)
    centred = full - full.mean(0)
    emp = torch.einsum("gki,gkj->kij", centred, centred) / (len(full) - 1)
    torch.testing.assert_close(emp, layer.covariance_matrix().detach(), atol=0.03, rtol=0.02)


def test_regression_bound_is_the_expected_log_likelihood_monte_carlo():
    """``E_q[log N(y | wᵀφ̃, σ²)]`` in closed form against the mean over 200,000 weight draws."""
    layer = random_layer("dense", n_out=1)
    phi, y = torch.randn(5, 4, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    w, b = layer.draw(200_000, torch.Generator().manual_seed(1))
    means = torch.einsum("gki,ni->gnk", w, phi) + b[:, None, :]  # [G, N, 1]
    var = layer.noise_variance().detach()
    logp = torch.distributions.Normal(means[..., 0], var.sqrt()).log_prob(y)
    with torch.no_grad():
        bound = regression_bound(layer, phi, y)
    torch.testing.assert_close(bound, logp.mean(), atol=5e-3, rtol=0)


def test_jensen_bound_is_log_of_the_expected_sum_and_below_the_expected_log_softmax():
    """The discriminative bound's log-sum-exp is ``log E[Σ_k exp z_k]`` (Monte Carlo over
    weights and logit noise), and the bound lies below ``E[log softmax(z)_y]``."""
    layer = random_layer("lowrank", n_out=4)
    with torch.no_grad():  # spreads small enough for a Monte Carlo mean of exp(z) to settle
        layer.log_diag.sub_(1.5)
        layer.off_diag.mul_(0.3)
        layer.noise_log_var.sub_(1.5)
    phi, y = torch.randn(5, 4, dtype=torch.float64), torch.tensor([0, 1, 2, 3, 1])
    g = torch.Generator().manual_seed(2)
    w, b = layer.draw(200_000, g)
    sd = layer.noise_variance().detach().sqrt()
    z = torch.einsum("gki,ni->gnk", w, phi) + b[:, None, :]
    z = z + sd * torch.randn(z.shape, generator=g, dtype=torch.float64)
    with torch.no_grad():
        bound = jensen_bound(layer, phi, y)
        mean = layer.augment(phi) @ layer.mean().T
    picked = mean.gather(1, y[:, None]).squeeze(1)
    lse_mc = z.exp().sum(-1).mean(0).log()  # [N]
    torch.testing.assert_close(bound, (picked - lse_mc).mean(), atol=1e-2, rtol=0)
    expected_log_softmax = z.log_softmax(-1).gather(2, y.expand(len(z), -1)[..., None]).mean()
    assert bound < expected_log_softmax


def test_objective_is_the_negative_elbo_per_datapoint():
    torch.manual_seed(0)
    m = bayesify.VBLL(mlp(3, 1, (8,), norm=None), prior_scale=0.5, wishart_scale=0.3, dof=2.0)
    x, y = torch.randn(7, 3), torch.randn(7)
    with torch.no_grad():
        loss = m.objective(x, y, 0.0, 70)
        phi = m.net[:-1](x)
    layer = m.layer
    sigma2 = layer.noise_variance().item()
    mean = (layer.augment(phi) @ layer.mean().T)[:, 0]
    quad = torch.einsum("ni,ij,nj->n", layer.augment(phi), layer.covariance_matrix()[0],
                        layer.augment(phi)).detach()  # fmt: skip
    ell = -0.5 * (math.log(2 * math.pi * sigma2) + ((y - mean) ** 2 + quad) / sigma2)
    nu = (2.0 + 1 + 1) / 2
    wishart = nu * math.log(1 / sigma2) - 0.5 * 0.3 / sigma2
    expected = -(ell.mean() + (wishart - layer.kl(0.5)) / 70)
    torch.testing.assert_close(loss, expected.detach().float())
    torch.testing.assert_close(
        wishart_term(layer, 0.3, 2.0), torch.tensor(wishart, dtype=torch.float32)
    )


def test_regression_predictive_matches_the_closed_form():
    """The Predictive's variance from T draws of the last layer: epistemic → φ̃ᵀSφ̃, aleatoric =
    the learned σ², mean → w̄ᵀφ̃."""
    x, y = regression_data()
    torch.manual_seed(0)
    m = bayesify.VBLL(mlp(5, 1, (16,), norm=None))
    m.fit((x[:200], y[:200]), epochs=5, batch_size=32, progress=False)
    pred = m.predict(x[:20], samples=40_000, seed=0)
    with torch.no_grad():
        phi = m.layer.augment(m.net[:-1](x[:20]))
        mean = (phi @ m.layer.mean().T)[:, 0]
        quad = m.layer.quadratic(phi)[:, 0]
    sigma2 = m.layer.noise_variance().item()
    assert m.noise_variance == pytest.approx(sigma2)
    torch.testing.assert_close(pred.aleatoric_variance, torch.full((20,), sigma2))
    torch.testing.assert_close(pred.epistemic_variance, quad, rtol=0.05, atol=0)
    torch.testing.assert_close(pred.mean, mean, atol=3 * quad.max().sqrt().item() / 200, rtol=0)
    torch.testing.assert_close(pred.variance, quad + sigma2, rtol=0.05, atol=0)


@pytest.mark.parametrize("refit", [True, False])
def test_validation_refits_the_noise_or_keeps_the_learned_one(refit):
    x, y = regression_data()
    torch.manual_seed(0)
    m = bayesify.VBLL(mlp(5, 1, (16,), norm=None), refit_noise=refit)
    m.fit((x[:200], y[:200]), val=(x[200:], y[200:]), epochs=3, batch_size=32, progress=False)
    learned = m.layer.noise_variance().item()
    assert m.noise_fitted and m.constant_variance is not None
    if refit:  # the PLL-optimal σ² of the validation rows, not the bound's
        assert m.noise_variance != pytest.approx(learned, rel=1e-3)
    else:
        assert m.noise_variance == pytest.approx(learned)


def test_classification_samples_are_logits_of_weight_draws():
    torch.manual_seed(0)
    m = bayesify.VBLL(mlp(3, 4, (8,), norm=None), task="classification")
    x = torch.randn(5, 3)
    g = torch.Generator().manual_seed(3)
    s = m.sample(x, 7, generator=g)
    w, b = m.layer.draw(7, torch.Generator().manual_seed(3))
    with torch.no_grad():
        phi = m.net[:-1](x).double()
    expected = torch.einsum("gki,ni->gnk", w, phi) + b[:, None, :]
    torch.testing.assert_close(s, expected.float(), atol=1e-5, rtol=1e-5)
    pred = m.predict(x, samples=50, seed=0)
    assert (pred.mutual_information > 0).all()


def test_the_default_carries_uncertainty_on_a_toy_with_a_gap():
    """Trained with the defaults on a 1-D toy with a gap, the epistemic share is well above the
    1% under which the spread counts as negligible, and the weights' spread grows in the gap
    and beyond the data."""
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.rand(128, 1, generator=g) * 2 - 3, torch.rand(128, 1, generator=g) + 1])
    y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(256, generator=g)
    perm = torch.randperm(256, generator=g)
    x, y = x[perm], y[perm]
    torch.manual_seed(0)
    method = bayesify.VBLL(mlp(1, 1, (32, 32), norm=None))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NegligibleSpreadWarning)
        method.fit((x[:200], y[:200]), val=(x[200:], y[200:]), epochs=60, batch_size=32,
                   progress=False)  # fmt: skip
    assert method.epistemic_share > 0.01
    inside = method.predict(torch.linspace(-2.8, -1.2, 50)[:, None], samples=200, seed=0)
    gap = method.predict(torch.linspace(-0.5, 0.5, 50)[:, None], samples=200, seed=0)
    far = method.predict(torch.linspace(5, 7, 50)[:, None], samples=200, seed=0)
    spread = [p.epistemic_variance.mean().item() for p in (inside, gap, far)]
    assert spread[1] > 1.5 * spread[0] and spread[2] > 10 * spread[0]
    assert epistemic_share(far) > 0.2


def test_the_default_classifier_is_less_sure_away_from_the_data():
    """Three blobs: the weights' disagreement (mutual information) and its share of the
    predictive entropy grow from the class centres to a ring beyond the data."""
    g = torch.Generator().manual_seed(0)
    centres = torch.tensor([[-2.0, 0.0], [2.0, 0.0], [0.0, 2.5]])
    y = torch.randint(0, 3, (300,), generator=g)
    x = centres[y] + 0.7 * torch.randn(300, 2, generator=g)
    torch.manual_seed(0)
    method = bayesify.VBLL(mlp(2, 3, (32, 32), norm=None), task="classification")
    with warnings.catch_warnings():
        warnings.simplefilter("error", NegligibleSpreadWarning)
        method.fit((x[:250], y[:250]), val=(x[250:], y[250:]), epochs=60, batch_size=32,
                   progress=False)  # fmt: skip
    angle = torch.linspace(0, 2 * math.pi, 64)
    ring = torch.stack([6 * angle.cos(), 0.8 + 6 * angle.sin()], 1)
    far = method.predict(ring, samples=200, seed=0)
    near = method.predict(centres, samples=200, seed=0)
    assert epistemic_share(far) > 0.1 > epistemic_share(near)
    assert far.mutual_information.max() > 10 * near.mutual_information.mean()


def test_from_pretrained_fits_only_the_last_layer_and_leaves_the_net_alone():
    x, y = regression_data()
    torch.manual_seed(0)
    net = mlp(5, 1, (16,), norm=None)
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    for _ in range(200):
        opt.zero_grad()
        F.mse_loss(net(x[:200]).squeeze(-1), y[:200]).backward()
        opt.step()
    before = copy.deepcopy(net.state_dict())
    kept = bayesify.VBLL.from_pretrained(net, val=(x[200:], y[200:]), epochs=0)
    assert torch.equal(kept.layer.weight, net[-1].weight)
    assert torch.equal(kept.layer.bias, net[-1].bias)
    tuned = bayesify.VBLL.from_pretrained(
        net, (x[:200], y[:200]), val=(x[200:], y[200:]), epochs=20, batch_size=16
    )
    for k, v in before.items():
        assert torch.equal(net.state_dict()[k], v), k
    for k, v in tuned.net[:-1].state_dict().items():  # the body is the trained one
        assert torch.equal(v, before[k]), k
    assert all(p.requires_grad for p in tuned.net.parameters())
    assert not torch.equal(tuned.layer.log_diag, kept.layer.log_diag)  # the layer was fitted
    pred = tuned.predict(x[200:], samples=50, seed=0)
    assert F.mse_loss(pred.mean, y[200:]).item() < 0.25 * y[200:].var().item()
    assert epistemic_share(pred) > 0.001
    with pytest.raises(ValueError, match="needs training data"):
        bayesify.VBLL.from_pretrained(net, val=(x, y), epochs=3)


@pytest.mark.parametrize(("task", "n_out"), [("regression", 1), ("classification", 4)])
def test_the_features_times_draws_pass_equals_the_shared_chunked_pass(task, n_out):
    """The body once per row and one product with the T draws gives the samples the shared
    pass (the body's output repeated T times through the layer) gives, for any row budget (up
    to the float32 body's rounding on chunks of other sizes)."""
    torch.manual_seed(0)
    m = bayesify.VBLL(mlp(6, n_out, (12,), norm=None), task=task, covariance="lowrank")
    x = torch.randn(50, 6)
    with torch.no_grad():
        shared = Sampling._draw_samples(m, x, 30, torch.Generator().manual_seed(0), 64)
        for rows in (None, 64, 7, 1):
            fast = m._draw_samples(x, 30, torch.Generator().manual_seed(0), rows)
            torch.testing.assert_close(fast, shared, rtol=1e-5, atol=1e-6)  # float32 body


def test_sampling_block_outside_predict_uses_the_mean_outside():
    layer = random_layer("diagonal")
    x = torch.randn(3, 4, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))
        with sampling(layer, 2, torch.Generator().manual_seed(0)):
            out = layer(torch.cat([x, x]))
    assert not torch.allclose(out[:3], out[3:])


def test_bad_options_are_one_line_errors():
    with pytest.raises(ValueError, match="prior_scale must be > 0"):
        bayesify.VBLL(mlp(2), prior_scale=0)
    with pytest.raises(ValueError, match="covariance"):
        bayesify.VBLL(mlp(2), covariance="full")
    with pytest.raises(ValueError, match="heteroscedastic"):
        bayesify.VBLL(mlp(2, 2), likelihood="heteroscedastic")
    with pytest.raises(ValueError, match="must end in nn.Linear"):
        bayesify.VBLL(mlp(2, 3))
    with pytest.raises(ValueError, match="no nn.Linear"):
        bayesify.VBLL(torch.nn.Sequential(torch.nn.ReLU()))
