"""Laplace against laplace-torch 0.3 (the reference implementation) on one small network.

Same network, data and prior precision: the log marginal likelihood, the GLM predictive's
means and covariances over logits and the probit probabilities agree to float64 round-off
(relative 1e-6 here; laplace-torch computes in float32, hence the tolerance), for the full,
Kronecker-factored and diagonal last-layer GGN. The prior precision maximising the marginal
likelihood agrees within 1%: ours is the exact root (bisection), laplace-torch's is 1000
Adam steps on log δ.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import bayesify

laplace = pytest.importorskip("laplace")

STRUCTURES = {"full": "full", "kfac": "kron", "diag": "diag"}


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(0)
    x = torch.randn(120, 5)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long() + (x[:, 2] > 0.8).long()
    net = nn.Sequential(nn.Linear(5, 12), nn.Tanh(), nn.Linear(12, 3))
    opt = torch.optim.Adam(net.parameters(), 3e-2)
    for _ in range(150):
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    return net.eval(), x, y


def _reference(net, x, y, structure, prior_precision):
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=40)
    la = laplace.Laplace(net, "classification", subset_of_weights="last_layer",
                         hessian_structure=STRUCTURES[structure],
                         prior_precision=prior_precision)  # fmt: skip
    la.fit(loader)
    return la


@pytest.mark.parametrize("structure", list(STRUCTURES))
def test_glm_predictive_and_marglik_agree_with_laplace_torch(trained, structure):
    net, x, y = trained
    ref = _reference(net, x, y, structure, 0.7)
    ours = bayesify.Laplace.from_pretrained(net, (x, y), task="classification", hessian=structure,
                                            prior_precision=0.7, batch_size=40,
                                            link="probit")  # fmt: skip
    torch.testing.assert_close(
        ours.log_marginal_likelihood(), float(ref.log_marginal_likelihood()), rtol=1e-5, atol=0
    )
    mean, cov = ours.glm(x[:10])
    f_mu, f_var = ref._glm_predictive_distribution(x[:10])
    torch.testing.assert_close(mean, f_mu.double(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(cov, f_var.double(), rtol=1e-4, atol=1e-6)
    probit = ours.predict(x[:10], samples=3, seed=0)
    expected = ref(x[:10], link_approx="probit")
    torch.testing.assert_close(probit.mean, expected, rtol=1e-5, atol=1e-6)
    # the draws: the sampled logits have the GLM covariance (4000 draws: 4 standard errors)
    options = {"hessian": structure, "prior_precision": 0.7, "link": "mc", "batch_size": 40}
    mc = bayesify.Laplace.from_pretrained(net, (x, y), task="classification", **options)
    logits = mc.sample(x[:4], 4000, seed=1).double()
    centred = logits - logits.mean(0)
    emp = torch.einsum("tnc,tnk->nck", centred, centred) / (len(logits) - 1)
    torch.testing.assert_close(emp, cov[:4], rtol=0.1, atol=0.06 * float(cov[:4].abs().max()))


@pytest.mark.parametrize("structure", list(STRUCTURES))
def test_marglik_prior_precision_agrees_with_laplace_torch(trained, structure):
    net, x, y = trained
    ref = _reference(net, x, y, structure, 1.0)
    ref.optimize_prior_precision(method="marglik", n_steps=1000, lr=0.05)
    ours = bayesify.Laplace.from_pretrained(net, (x, y), task="classification",
                                            hessian=structure)  # fmt: skip
    assert ours.prior_precision == pytest.approx(float(ref.prior_precision), rel=0.01)
    # and ours is the maximiser: laplace-torch's δ gives no higher marginal likelihood
    assert (
        ours.log_marginal_likelihood()
        >= ours.log_marginal_likelihood(float(ref.prior_precision)) - 1e-9
    )


def test_regression_marglik_and_glm_agree_at_a_fixed_noise(trained):
    net0, x, _ = trained
    torch.manual_seed(1)
    yr = x[:, 0] - x[:, 1] ** 2 + 0.2 * torch.randn(len(x))
    net = nn.Sequential(nn.Linear(5, 12), nn.Tanh(), nn.Linear(12, 1))
    opt = torch.optim.Adam(net.parameters(), 3e-2)
    for _ in range(200):
        opt.zero_grad()
        nn.functional.mse_loss(net(x).squeeze(-1), yr).backward()
        opt.step()
    net.eval()
    ours = bayesify.Laplace.from_pretrained(
        net, (x, yr), hessian="kfac", batch_size=40, subset="last-layer"
    )
    sigma = ours.noise_variance**0.5
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, yr.unsqueeze(-1)), batch_size=40
    )
    ref = laplace.Laplace(net, "regression", subset_of_weights="last_layer",
                          hessian_structure="kron", sigma_noise=sigma,
                          prior_precision=ours.prior_precision)  # fmt: skip
    ref.fit(loader)
    torch.testing.assert_close(
        ours.log_marginal_likelihood(), float(ref.log_marginal_likelihood()), rtol=1e-5, atol=0
    )
    mean, cov = ours.glm(x[:10])
    f_mu, f_var = ref._glm_predictive_distribution(x[:10])
    torch.testing.assert_close(mean, f_mu.double(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(cov, f_var.double(), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("structure", list(STRUCTURES))
def test_output_space_draws_are_the_glm_predictive_row_by_row(trained, structure):
    """The sampled logits are drawn per row in output space: within ONE call, 3,000 copies of
    an input in each of 2 groups are 6,000 independent draws whose mean and covariance are
    laplace-torch's closed-form GLM predictive (and ours) within 4.5 Monte Carlo standard
    errors per entry, whose softmax mean is laplace-torch's glm/mc predictive (20,000 of its
    samples) within the two estimates' joint error, and whose neighbouring copies in one group
    are uncorrelated (one weight draw per group would make them equal)."""
    net, x, y = trained
    ref = _reference(net, x, y, structure, 0.7)
    options = {"hessian": structure, "prior_precision": 0.7, "link": "mc", "batch_size": 40}
    ours = bayesify.Laplace.from_pretrained(net, (x, y), task="classification", **options)
    copies, inputs = 3000, x[:2]
    logits = ours.sample(inputs.repeat_interleave(copies, 0), 2, seed=1).double()  # [2, 2R, C]
    f_mu, f_var = (t.double() for t in ref._glm_predictive_distribution(inputs))
    g_mu, g_var = ours.glm(inputs)
    gen = torch.Generator().manual_seed(0)
    their_probs = ref.predictive_samples(inputs, pred_type="glm", n_samples=20000, generator=gen)
    their_probs = their_probs.double()
    for i in range(len(inputs)):
        mine = logits[:, i * copies : (i + 1) * copies]  # [2, R, C]
        draws = mine.reshape(-1, mine.shape[-1])
        n = len(draws)
        var = f_var[i].diagonal()
        se_mean = (var / n).sqrt()
        se_cov = ((torch.outer(var, var) + f_var[i].square()) / n).sqrt()
        for mu, cov in ((f_mu[i], f_var[i]), (g_mu[i], g_var[i])):
            assert ((draws.mean(0) - mu).abs() <= 4.5 * se_mean).all()
            assert ((draws.T.cov() - cov).abs() <= 4.5 * se_cov).all()
        probs, theirs = draws.softmax(-1), their_probs[:, i]  # [n, C], [20000, C]
        se_p = (probs.var(0) / n + theirs.var(0) / len(theirs)).sqrt()
        # (+1e-4: a class of probability ~1e-5 is heavy-tailed, its spread poorly estimated)
        assert ((probs.mean(0) - theirs.mean(0)).abs() <= 4.5 * se_p + 1e-4).all()
        # neighbouring copies of the input in one group: independent draws
        z = (mine - f_mu[i]) / var.sqrt()  # [2, R, C] standardised
        a, b = z[:, 0::2].reshape(-1), z[:, 1::2].reshape(-1)
        assert abs(float((a * b).mean())) <= 4.5 / len(a) ** 0.5
