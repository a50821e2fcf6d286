"""One ``from_pretrained`` for every method: its options, MCBN's batch size, inserted dropout,
ensembles of trained networks, and the caller's network left as it was."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import bayesify
from bayesify.models import mlp
from bayesify.nn.dropout import MCDropout as MCDropoutLayer


def _data(n: int = 160, d: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, torch.sin(x[:, 0]) + 0.1 * torch.randn(n, generator=g)


def _seen_rows(net: nn.Module, run) -> list[int]:
    seen: list[int] = []
    handle = net.register_forward_pre_hook(lambda _m, a: seen.append(len(a[0])))
    try:
        run()
    finally:
        handle.remove()
    return seen


CASES = {
    "mcbn": (bayesify.MCBN, dict(norm="batch"), dict(batch_size=16, bank_size=4)),
    "mc-dropout": (bayesify.MCDropout, dict(norm=None, dropout=0.1), {}),
    "bbb": (bayesify.BayesByBackprop, dict(norm=None), dict(epochs=1)),
    "ibnn": (bayesify.IBNN, dict(norm=None), dict(epochs=1)),
    "stochastic-norm": (bayesify.StochasticNorm, dict(norm=None), dict(epochs=1)),
    "deterministic": (bayesify.Deterministic, dict(norm=None), {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_from_pretrained_leaves_the_callers_network_and_fits_noise(name):
    cls, net_opts, opts = CASES[name]
    x, y = _data()
    net = mlp(4, hidden=(8,), **net_opts).train()
    state = copy.deepcopy(net.state_dict())
    method = cls.from_pretrained(net, (x[:128], y[:128]), val=(x[128:], y[128:]), **opts)
    method.predict(x[:5], samples=3, seed=0)
    assert type(method) is cls and method.noise_fitted
    assert net.training and list(net.state_dict()) == list(state)
    for k, v in state.items():
        torch.testing.assert_close(net.state_dict()[k], v, rtol=0, atol=0)


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['bank_sise'\].*bank_size"):
        bayesify.MCBN.from_pretrained(mlp(4), _data(), batch_size=16, bank_sise=4)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['epochs'\] for MCBN"):
        bayesify.MCBN.from_pretrained(mlp(4), _data(), batch_size=16, epochs=3)


def test_mcbn_bank_follows_the_dataloader_or_the_argument_never_a_default():
    x, y = _data(200)
    net = mlp(4, hidden=(8,))
    loader = DataLoader(TensorDataset(x, y), batch_size=50, shuffle=True)
    method = bayesify.MCBN(net, bank_size=3)  # the forwards of the bank, on its own copy
    seen = _seen_rows(
        method.net, lambda: method._from_pretrained(
            loader, None, batch_size=None, seed=0, progress=False)
    )  # fmt: skip
    assert seen == [50, 50, 50] and method.bank_batch_size == 50
    assert bayesify.MCBN.from_pretrained(net, loader, bank_size=3).bank_batch_size == 50
    assert bayesify.MCBN.from_pretrained(net, (x, y), batch_size=20).bank_batch_size == 20
    with pytest.raises(ValueError, match="mini-batch size the network was trained with"):
        bayesify.MCBN.from_pretrained(net, (x, y))
    with pytest.raises(ValueError, match="conflicting MCBN batch sizes .*batch_size=32.*=50"):
        bayesify.MCBN.from_pretrained(net, loader, batch_size=32)
    with pytest.raises(ValueError, match="needs the training data"):
        bayesify.MCBN.from_pretrained(net, val=(x, y), batch_size=32)


def test_mc_dropout_inserts_dropout_where_asked_and_round_trips(tmp_path):
    net = mlp(4, hidden=(8, 8), norm=None)  # three nn.Linear, no dropout
    with pytest.raises(ValueError, match="dropout=p"):
        bayesify.MCDropout.from_pretrained(net)
    x, y = _data()
    counts = {}
    for where in ("before-linear", "before-hidden-linear", "before-last-linear"):
        m = bayesify.MCDropout.from_pretrained(net, dropout=0.1, where=where, val=(x, y))
        counts[where] = len([l for l in m.net.modules() if isinstance(l, MCDropoutLayer)])
    assert counts == {"before-linear": 3, "before-hidden-linear": 2, "before-last-linear": 1}
    assert not any(isinstance(l, MCDropoutLayer | nn.Dropout) for l in net.modules())
    with torch.no_grad():  # outside sampling, in eval mode: the network's own function
        torch.testing.assert_close(m.net.eval()(x[:5]), net.eval()(x[:5]))
    loaded = bayesify.load(m.save(tmp_path / "b"))
    a, b = m.sample(x[:5], 4, seed=1), loaded.sample(x[:5], 4, seed=1)
    torch.testing.assert_close(a, b)
    assert (a[0] - a[1]).abs().max() > 0
    with pytest.raises(ValueError, match="unknown where 'after'; valid: before-linear"):
        bayesify.MCDropout(net, dropout=0.1, where="after")


def test_ensemble_of_trained_networks():
    nets = [mlp(4, hidden=(8,), norm=None) for _ in range(3)]
    x, y = _data()
    ens = bayesify.DeepEnsemble.from_pretrained(nets, val=(x, y))
    assert ens.members == 3
    out = ens.sample(x[:6], 3, seed=0)  # k-major: sample m is member m
    for m, net in enumerate(nets):
        with torch.no_grad():
            torch.testing.assert_close(out[m], net.eval()(x[:6]))
    assert ens.member_methods[0].net is not nets[0]
    banks = bayesify.DeepEnsemble.from_pretrained(
        [mlp(4, hidden=(8,)) for _ in range(2)], (x, y), method=bayesify.MCBN,
        method_options={"bank_size": 3}, batch_size=16,
    )  # fmt: skip
    assert [mm.bank_size for mm in banks.member_methods] == [3, 3]
    with pytest.raises(ValueError, match="architecture"):
        bayesify.DeepEnsemble([mlp(4, hidden=(8,)), mlp(4, hidden=(9,))])
    with pytest.raises(ValueError, match="takes a list of trained networks"):
        bayesify.DeepEnsemble.from_pretrained(mlp(4), val=(x, y))
    with pytest.raises(ValueError, match="members must equal the 2 networks"):
        bayesify.DeepEnsemble([mlp(4), mlp(4)], members=3)


def test_bbb_converts_and_fine_tunes_only_when_asked():
    x, y = _data()
    net = mlp(4, hidden=(8,), norm=None)
    plain = bayesify.BayesByBackprop.from_pretrained(net)
    torch.testing.assert_close(plain.layers[0].weight_mu, net[0].weight)
    tuned = bayesify.BayesByBackprop.from_pretrained(net, (x, y), epochs=1, lr=1e-2)
    assert (tuned.layers[0].weight_mu - net[0].weight).abs().max() > 0
    with pytest.raises(ValueError, match="needs training data"):
        bayesify.BayesByBackprop.from_pretrained(net, epochs=2)
    with pytest.raises(ValueError, match="needs training data"):
        bayesify.IBNN.from_pretrained(net)
