"""Paper presets: each preset's config and training recipe reach the training loop."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import bayesify
from bayesify.methods.core import training
from bayesify.methods.core.presets import PRESETS, get_preset
from bayesify.models import mlp
from bayesify.nn.stochastic_scale import StochasticScale
from bayesify.train import loader_batch_size


@pytest.fixture
def spy(monkeypatch):
    """Record what Method.fit hands the training loop; run one epoch only."""
    calls = []
    real = training.train_loop

    def fake(model, objective, loader, optimizer, *, epochs, **kw):
        calls.append({"epochs": epochs, "batch_size": loader_batch_size(loader),
                      "optimizer": optimizer, "patience": kw.get("patience")})  # fmt: skip
        return real(model, objective, loader, optimizer, epochs=1, **kw)

    monkeypatch.setattr(training, "train_loop", fake)
    return calls


def _data(n=256, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, x[:, 0] + 0.1 * torch.randn(n, generator=g)


def _groups(opt):
    return sorted((g["lr"], g["weight_decay"], len(g["params"])) for g in opt.param_groups)


def test_every_method_has_a_paper_preset_and_bad_names_fail():
    for name in bayesify.METHODS:
        # a distilled student has no recipe of its own: `distill`'s arguments make it
        if name not in ("deterministic", "distilled"):
            assert (name, "paper") in PRESETS, name
    with pytest.raises(ValueError, match="unknown preset 'papr' for ibnn; valid: paper"):
        get_preset("ibnn", "papr")
    with pytest.raises(ValueError, match="unknown preset"):
        bayesify.MCBN(mlp(3), preset="nope")


def test_ibnn_paper_recipe_reaches_training(spy):
    torch.manual_seed(0)
    net = mlp(4, 1, (64, 64), norm=None)
    m = bayesify.IBNN(net, preset="paper")
    # μ ~ N(1, 0.75²), σ ~ N(0.05, 0.02²) over the 4 × (4 + 64 + 64) node parameters
    mu = torch.cat([layer.mu.detach().flatten() for layer in m.layers])
    sigma = torch.cat([F.softplus(layer.rho.detach()).flatten() for layer in m.layers])
    assert float(mu.std()) == pytest.approx(0.75, rel=0.1)
    assert float(mu.mean()) == pytest.approx(1.0, abs=0.1)
    assert float(sigma.mean()) == pytest.approx(0.05, abs=0.005)
    assert float(sigma.std()) == pytest.approx(0.02, rel=0.15)
    # β reaches 1 after 200 of 300 epochs
    assert m.beta(100 / 300) == pytest.approx(0.5) and m.beta(200 / 300) == pytest.approx(1.0)
    # S = 2 draws per datum: the first layer sees 2 × batch rows in training
    rows = []
    hook = m.layers[0].register_forward_pre_hook(lambda mod, a: rows.append(len(a[0])))
    m.fit(_data(), val=_data(64, seed=1), seed=0, progress=False)
    hook.remove()
    (call,) = spy
    assert (call["epochs"], call["batch_size"]) == (300, 128)
    assert type(call["optimizer"]) is torch.optim.SGD
    assert call["optimizer"].defaults["momentum"] == 0.9
    weights = sum(1 for p in m.net.parameters()) - 2 * len(m.layers)  # the wrapped copy
    assert _groups(call["optimizer"]) == sorted([(1.2, 0.0, 2 * len(m.layers)),
                                                 (0.05, 5e-4, weights)])  # fmt: skip
    assert rows[0] == 2 * 128


def test_explicit_arguments_win_over_the_preset(spy):
    m = bayesify.IBNN(mlp(4, 1, (8,), norm=None), preset="paper", train_samples=1)
    assert m.config.train_samples == 1 and m.config.variational_lr == 1.2
    m.fit(_data(), epochs=3, batch_size=16, optimizer="adam", progress=False)
    assert (spy[0]["epochs"], spy[0]["batch_size"]) == (3, 16)
    assert type(spy[0]["optimizer"]) is torch.optim.Adam
    assert bayesify.IBNN(mlp(4, 1, (8,), norm=None)).recipe == {}


def test_ibnn_pretrained_preset_fine_tunes_the_weights(spy):
    p = get_preset("ibnn", "paper-pretrained")
    m = bayesify.IBNN.from_pretrained(mlp(4, 1, (8,), norm=None), _data(),
                                      **p.from_pretrained, preset="paper-pretrained")  # fmt: skip
    (call,) = spy
    assert (call["epochs"], call["batch_size"]) == (15, 256)
    lrs = {g["lr"] for g in call["optimizer"].param_groups}
    assert lrs == {0.2, 1e-4} and m.config.prior_std == 0.1


def test_stochastic_norm_paper_normalises_the_output_layer_and_inits_from_data(spy):
    torch.manual_seed(0)
    net = mlp(4, 1, (32, 32), norm=None)
    m = bayesify.StochasticNorm(net, preset="paper")
    assert isinstance(m.net[-1], StochasticScale) and len(m.layers) == 3
    x, y = _data(512)
    x = 3.0 * x + 2.0  # far from unit variance: the init must undo it
    m.objective(x[:128], y[:128], 0.0, 512)  # first batch: data-dependent init, then the loss
    acts = []
    hooks = [la.register_forward_hook(lambda mod, a, o: acts.append(o)) for la in m.layers]
    m.net.eval()
    with torch.no_grad():  # noise-free pass on the same batch: every layer's output standardised
        m.net(x[:128])
    for h in hooks:
        h.remove()
    assert len(acts) == 3
    for a in acts:
        assert float(a.mean(0).abs().max()) < 1e-4
        assert torch.allclose(a.std(0, unbiased=False), torch.ones(a.shape[1]), atol=1e-4)
    assert m.initialised
    m.fit((x, y), seed=0, progress=False)
    (call,) = spy
    assert (call["epochs"], call["batch_size"]) == (1200, 32)
    assert type(call["optimizer"]) is torch.optim.SGD
    assert {g["lr"] for g in call["optimizer"].param_groups} == {0.01}


def test_stochastic_norm_takes_per_layer_bn_levels():
    net = mlp(4, 1, (8, 8), norm=None)
    m = bayesify.StochasticNorm(net, noise="bn", bn_levels=[(0.1, 0.2), (0.3, 0.4)])
    assert [(la.bn_mult_std, la.bn_add_std) for la in m.layers] == [(0.1, 0.2), (0.3, 0.4)]
    with pytest.raises(ValueError, match="bn_levels has 1"):
        bayesify.StochasticNorm(mlp(4, 1, (8, 8), norm=None), noise="bn", bn_levels=[(0.1, 0.2)])


def test_mcbn_paper_recipe(spy):
    m = bayesify.MCBN(mlp(4, 1, (16, 16)), preset="paper")
    m.fit(_data(), val=_data(64, seed=1), progress=False)
    (call,) = spy
    assert (call["epochs"], call["batch_size"], call["patience"]) == (2000, 32, 200)
    assert type(call["optimizer"]) is torch.optim.Adam
    assert {g["lr"] for g in call["optimizer"].param_groups} == {1e-3}
    assert m.bank_size == 500 and m.config.noise_objective == "crps"
    assert get_preset("mcbn", "paper").samples == 500


def test_mc_dropout_paper_recipe(spy):
    m = bayesify.MCDropout(mlp(4, 1, (50,), norm=None, dropout=0.2), preset="paper")
    assert all(layer.p == 0.05 for layer in m.layers)
    n = 256
    assert m.weight_decay(n) == pytest.approx(1e-2**2 * 0.95 / (2 * n * m.config.tau))
    m.fit(_data(n), progress=False)
    assert (spy[0]["epochs"], spy[0]["batch_size"]) == (40, 128)
    assert type(spy[0]["optimizer"]) is torch.optim.Adam


def test_bbb_paper_recipe(spy):
    m = bayesify.BayesByBackprop(mlp(4, 1, (8,), norm=None), preset="paper")
    c = m.config
    assert (c.prior, c.mixture_pi, c.mixture_sigma1) == ("mixture", 0.5, 1.0)
    assert c.mixture_sigma2 == pytest.approx(math.exp(-6))
    m.fit(_data(), progress=False)
    assert (spy[0]["epochs"], spy[0]["batch_size"]) == (600, 128)
    assert type(spy[0]["optimizer"]) is torch.optim.SGD


def test_ensemble_paper_recipe_reaches_every_member(spy):
    m = bayesify.DeepEnsemble(mlp(4, 1, (8,), norm=None), preset="paper")
    assert m.members == 5
    m.fit(_data(), progress=False)
    assert [(c["epochs"], c["batch_size"]) for c in spy] == [(40, 100)] * 5
    assert all(type(c["optimizer"]) is torch.optim.Adam for c in spy)
