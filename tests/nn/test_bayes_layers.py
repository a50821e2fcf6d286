"""BayesLinear / BayesConv2d: KL, moments of the local reparameterisation and of the per-group
convolution weights, conversion."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import integrate, stats
from torch import nn

from bayesify.nn import reference_loop, repeat_samples, sampling
from bayesify.nn.bayes_layers import BayesConv2d, BayesLinear, bayesianize
from bayesify.nn.gaussian_posterior import Prior, gaussian_kl


def test_gaussian_kl_closed_form_matches_numerical_integration():
    mu, sigma, prior_sigma = 0.7, 0.3, 1.5
    q, p = stats.norm(mu, sigma), stats.norm(0, prior_sigma)
    expected, _ = integrate.quad(lambda w: q.pdf(w) * (q.logpdf(w) - p.logpdf(w)), -10, 10)
    got = gaussian_kl(torch.tensor([mu]), torch.tensor([sigma]), prior_sigma)
    assert got.item() == pytest.approx(expected, rel=1e-6)


def test_layer_kl_closed_form_vs_monte_carlo_and_mixture_estimate():
    torch.manual_seed(0)
    layer = BayesLinear(4, 3, prior=Prior(sigma=0.5), init_rho=-1.0)
    closed = layer.kl().item()
    mu = torch.cat([layer.weight_mu.flatten(), layer.bias_mu]).detach().double().numpy()
    sd = torch.cat([layer.weight_sigma.flatten(), layer.bias_sigma]).detach().double().numpy()
    w = stats.norm(mu, sd).rvs(size=(20000, mu.size), random_state=0)
    mc = (stats.norm(mu, sd).logpdf(w) - stats.norm(0, 0.5).logpdf(w)).sum(1)
    assert closed == pytest.approx(mc.mean(), abs=4 * mc.std() / math.sqrt(len(mc)))
    # the scale mixture: the one-sample estimate is unbiased for the exact KL
    mix = Prior(kind="mixture", pi=0.3, sigma1=1.0, sigma2=0.1)
    layer.prior = mix
    est = torch.stack([layer.kl() for _ in range(4000)]).detach().double()
    logp = mix.log_prob  # reference with scipy's densities
    ref = (
        stats.norm(mu, sd).logpdf(w)
        - torch.logaddexp(
            math.log(0.3) + torch.distributions.Normal(0, 1.0).log_prob(torch.tensor(w)),
            math.log(0.7) + torch.distributions.Normal(0, 0.1).log_prob(torch.tensor(w)),
        ).numpy()
    )
    ref = ref.sum(1)
    assert est.mean().item() == pytest.approx(ref.mean(), abs=5 * ref.std() / 60)
    assert logp(torch.zeros(1)).item() == pytest.approx(
        math.log(0.3 * stats.norm(0, 1).pdf(0) + 0.7 * stats.norm(0, 0.1).pdf(0))
    )


def test_local_reparameterisation_moments_match_sampled_weights():
    torch.manual_seed(1)
    layer = BayesLinear(5, 2, init_rho=-1.5)
    x = torch.randn(3, 5)
    with torch.no_grad(), sampling(layer, 20000, torch.Generator().manual_seed(0)):
        lrt = layer(repeat_samples(x, 20000)).view(20000, 3, 2)
        w = layer.weight_mu + layer.weight_sigma * torch.randn(20000, 2, 5)
        b = layer.bias_mu + layer.bias_sigma * torch.randn(20000, 2)
        direct = torch.einsum("tof,nf->tno", w, x) + b[:, None, :]
    torch.testing.assert_close(lrt.mean(0), direct.mean(0), atol=0.03, rtol=0.02)
    torch.testing.assert_close(lrt.var(0), direct.var(0), atol=0.01, rtol=0.05)


def test_conv_samples_have_the_posterior_moments():
    torch.manual_seed(2)
    layer = BayesConv2d(2, 3, 3, padding=1, init_rho=-1.0)
    x = torch.randn(1, 2, 4, 4)
    with torch.no_grad():
        outs = []
        for s in range(400):  # 400 blocks of 25 groups, one weight sample per group
            with sampling(layer, 25, torch.Generator().manual_seed(s)):
                outs.append(layer(repeat_samples(x, 25)))
        flip = torch.cat(outs)  # [10000, 3, 4, 4]
        w = layer.weight_mu + layer.weight_sigma * torch.randn(10000, *layer.weight_mu.shape)
        b = layer.bias_mu + layer.bias_sigma * torch.randn(10000, 3)
        direct = nn.functional.conv2d(x, w.reshape(30000, 2, 3, 3), padding=1)  # [1, 30000, 4, 4]
        direct = direct.view(10000, 3, 4, 4) + b[..., None, None]
    torch.testing.assert_close(flip.mean(0), direct.mean(0), atol=0.05, rtol=0.05)
    torch.testing.assert_close(flip.var(0), direct.var(0), atol=0.05, rtol=0.1)


def test_eval_is_the_mean_network_and_train_is_random():
    torch.manual_seed(3)
    lin = nn.Linear(4, 2)
    layer = BayesLinear.from_linear(lin)
    x = torch.randn(5, 4)
    torch.testing.assert_close(layer.eval()(x), lin(x))
    a, b = layer.train()(x), layer(x)
    assert (a - b).abs().max() > 0


def test_chunks_and_loop_replay_the_same_draws():
    torch.manual_seed(4)
    net = nn.Sequential(
        nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 16, 3)
    )
    bayesianize(net, init_rho=-2.0)
    net.eval()
    x = torch.randn(7, 1, 4, 4)
    with torch.no_grad():
        with sampling(net, 4, torch.Generator().manual_seed(9)):
            whole = net(repeat_samples(x, 4)).view(4, 7, 3)
        with sampling(net, 4, torch.Generator().manual_seed(9)):
            parts = torch.cat([net(repeat_samples(c, 4)).view(4, -1, 3) for c in x.split(3)], 1)
        loop = reference_loop(net, x, 4, torch.Generator().manual_seed(9))
    torch.testing.assert_close(whole, parts)
    torch.testing.assert_close(whole, loop)


def test_conversion_keeps_pretrained_means_and_last_k():
    torch.manual_seed(5)
    net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    weights = [m.weight.detach().clone() for m in net if isinstance(m, nn.Linear)]
    layers = bayesianize(net, last_k=2)
    assert isinstance(net[0], nn.Linear) and len(layers) == 2
    torch.testing.assert_close(net[2].weight_mu, weights[1])
    torch.testing.assert_close(net[4].weight_mu, weights[2])
    with pytest.raises(ValueError, match="Linear or Conv2d"):
        bayesianize(nn.Sequential(nn.ReLU()))


def test_conv_rows_of_a_group_share_one_weight_sample():
    """While sampling, every row of group t is convolved with group t's weight sample: two
    equal rows get equal outputs in a group (flipout's per-row signs gave them different ones),
    the groups differ, and each group equals a plain convolution with the weights its key
    gives (one normal draw per group, the weight part first, then the bias)."""
    torch.manual_seed(5)
    layer = BayesConv2d(2, 3, 3, padding=1, init_rho=-1.0)
    row = torch.randn(1, 2, 5, 5)
    x = torch.cat([row, torch.randn(1, 2, 5, 5), row])  # rows 0 and 2 equal
    with torch.no_grad(), sampling(layer, 4, torch.Generator().manual_seed(1)):
        out = layer(repeat_samples(x, 4)).view(4, 3, 3, 5, 5)
        eps = layer.noise.group_normal(54 + 3, torch.device("cpu"))
    torch.testing.assert_close(out[:, 0], out[:, 2])
    assert not torch.allclose(out[0], out[1])
    with torch.no_grad():
        for t in range(4):
            w = layer.weight_mu + layer.weight_sigma * eps[t, :54].view(3, 2, 3, 3)
            b = layer.bias_mu + layer.bias_sigma * eps[t, 54:]
            ref = nn.functional.conv2d(x, w, b, padding=1)
            torch.testing.assert_close(out[t], ref, rtol=1e-5, atol=1e-5)


def test_conv_of_one_repeated_row_matches_each_groups_weight_sample():
    """A repeated input (stride 0 over the rows, what ``repeat_samples`` gives for one row):
    group t equals a plain convolution with the weights its key gives, and a float64 layer
    keeps its dtype."""
    for dtype in (torch.float32, torch.float64):
        torch.manual_seed(6)
        layer = BayesConv2d(2, 3, 3, padding=1, init_rho=-1.0).to(dtype)
        x = torch.randn(1, 2, 5, 5, dtype=dtype)
        rows = repeat_samples(x, 4)
        assert rows.stride(0) == 0
        with torch.no_grad(), sampling(layer, 4, torch.Generator().manual_seed(1)):
            out = layer(rows)
            eps = layer.noise.group_normal(54 + 3, torch.device("cpu")).to(dtype)
        assert out.shape == (4, 3, 5, 5) and out.dtype == dtype
        with torch.no_grad():
            for t in range(4):
                w = layer.weight_mu + layer.weight_sigma * eps[t, :54].view(3, 2, 3, 3)
                b = layer.bias_mu + layer.bias_sigma * eps[t, 54:]
                ref = nn.functional.conv2d(x, w, b, padding=1)
                torch.testing.assert_close(out[t : t + 1], ref)
