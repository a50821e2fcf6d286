"""DeepEnsemble: the shared suite over plain, MC-dropout, MCBN and BBB members; vmap = loop."""

from __future__ import annotations

import pytest
import torch
from conformance import MethodConformance
from test_mcbn import regression_data

import bayesify
from bayesify.models import lenet, mlp


def _fit(method, n=120):
    x, y = regression_data(160)
    method.fit((x[:n], y[:n]), val=(x[n:], y[n:]), epochs=1, batch_size=20, progress=False)
    return method, x[n : n + 20]


class TestEnsemblePlain(MethodConformance):
    samples = 3  # plain members: T is always M

    def make(self):
        return _fit(bayesify.DeepEnsemble(mlp(5, hidden=(8,), norm=None), members=3))


class TestEnsembleOfMCDropout(MethodConformance):
    samples = 7  # M = 3 does not divide T: 9 samples, 3 per member

    def make(self):
        net = mlp(5, hidden=(8, 8), norm="batch", dropout=0.2)
        return _fit(bayesify.DeepEnsemble(net, members=3, method=bayesify.MCDropout))


class TestEnsembleOfMCBN(MethodConformance):
    def make(self):
        net = mlp(5, hidden=(8,), norm="batch")
        ens = bayesify.DeepEnsemble(
            net, members=2, method=bayesify.MCBN, method_options={"bank_size": 4}
        )
        return _fit(ens)


class TestEnsembleOfBBBClassification(MethodConformance):
    def make(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(32, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (32,), generator=g)
        ens = bayesify.DeepEnsemble(
            lenet(norm=None, width=1),
            members=2,
            method=bayesify.BayesByBackprop,
            method_options={"last_k": 2, "init_rho": -3.0},
            task="classification",
        )
        ens.fit((x, y), epochs=1, batch_size=16, progress=False)
        return ens, x[:6]


def test_plain_members_differ_and_are_the_samples_once_each():
    """Asked for 6 samples, 3 plain members give 3: sample m is member m's own output (their
    mixture is exact with M; repeats would add nothing)."""
    ens, x = TestEnsemblePlain().make()
    assert [ens.sample_count(t) for t in (1, 3, 6, 100)] == [3, 3, 3, 3]
    out = ens.sample(x, 6, seed=0)  # [3, N, 1]
    assert out.shape[0] == 3
    for m, member in enumerate(ens.member_methods):
        with torch.no_grad():
            torch.testing.assert_close(out[m], member.net.eval()(x))
    assert (out[0] - out[1]).abs().max() > 1e-4
    first = [p.detach().clone() for p in ens.member_methods[0].net.parameters()]
    second = list(ens.member_methods[1].net.parameters())
    assert any((a - b).abs().max() > 0 for a, b in zip(first, second, strict=True))


def test_loop_fallback_gives_the_vmap_result():
    torch.manual_seed(0)
    net = mlp(5, hidden=(8, 8), norm="batch", dropout=0.2)
    ens = bayesify.DeepEnsemble(net, members=3, method=bayesify.MCDropout)
    x = torch.randn(20, 5)
    fast = ens.sample(x, 6, seed=3)
    assert ens._vmap_ok is True
    ens._vmap_ok = False
    try:
        slow = ens.sample(x, 6, seed=3)
    finally:
        ens._vmap_ok = None
    torch.testing.assert_close(fast, slow)
    torch.testing.assert_close(fast, ens.reference_samples(x, 6, torch.Generator().manual_seed(3)))


def test_bundle_holds_prefixed_member_weights(tmp_path):
    from safetensors.torch import load_file

    ens, _ = TestEnsemblePlain().make()
    ens.save(tmp_path / "b")
    keys = load_file(str(tmp_path / "b" / "weights.safetensors")).keys()
    assert {k.split(".")[1] for k in keys} == {"0", "1", "2"}
    assert all(k.startswith("members.") for k in keys)


def test_bad_options_are_clear():
    with pytest.raises(ValueError, match="members"):
        bayesify.DeepEnsemble(mlp(2), members=0)
    with pytest.raises(ValueError, match="takes the member method's class.*get_method"):
        bayesify.DeepEnsemble(mlp(2), method="mc-dropout")
    with pytest.raises(ValueError, match="ensemble of ensembles"):
        bayesify.DeepEnsemble(mlp(2), method=bayesify.DeepEnsemble)


@pytest.mark.parametrize("t", [4, 2, 3])
def test_predictive_mean_is_the_average_of_the_members_means(t):
    """M = 3 plain members weigh the same whatever T: each is drawn once."""
    ens, x = TestEnsemblePlain().make()
    pred = ens.predict(x, samples=t, seed=0)
    assert pred.num_samples == 3
    with torch.no_grad():
        means = torch.stack([mm.net.eval()(x).squeeze(-1) for mm in ens.member_methods])
    torch.testing.assert_close(pred.mean, means.mean(0), rtol=1e-6, atol=1e-6)


def test_mc_dropout_members_give_equal_sample_counts():
    net = mlp(5, hidden=(8,), norm=None, dropout=0.2)
    ens = bayesify.DeepEnsemble(net, members=3, method=bayesify.MCDropout)
    x = torch.randn(4, 5)
    out = ens.sample(x, 4, seed=0)  # 6 samples: k-major, sample k*3 + m is member m's
    assert out.shape[0] == 6
    for m, member in enumerate(ens.member_methods):
        own = member.sample(x, 2, seed=0)
        torch.testing.assert_close(out[m::3], own)
