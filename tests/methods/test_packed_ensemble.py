"""Packed-Ensembles: the shared suite on an MLP and a LeNet with batch norm; the grouped layers
against M separate layers with the members' exact weights run one by one; the predictive as
the members' mixture; the objective as the members' losses; widths and parameters; T = M;
the spread of the default; the refusals."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from conformance import MethodConformance, fitted_lenet, fitted_regression
from test_mcbn import regression_data

import bayesify
from bayesify.methods.core.spread import NegligibleSpreadWarning, epistemic_share
from bayesify.models import mlp
from bayesify.nn.packed import (
    PackedConv2d,
    PackedLinear,
    member_network,
    members_first,
    pack_network,
)
from bayesify.seeding import seeded


class TestPackedEnsembleRegression(MethodConformance):
    samples = 4  # T is always M

    def make(self):
        return fitted_regression(bayesify.PackedEnsemble)


class TestPackedEnsembleConvClassificationWithBN(MethodConformance):
    samples = 3

    def make(self):
        return fitted_lenet(bayesify.PackedEnsemble, members=3, gamma=2)


def test_a_grouped_linear_is_its_groups_as_separate_linear_layers():
    with seeded(0):
        layer = PackedLinear(12, 8, groups=4)
    x = torch.randn(5, 12)
    out = layer(x)
    for g in range(4):
        w, b = layer.weight[g], layer.bias[2 * g : 2 * g + 2]
        torch.testing.assert_close(out[:, 2 * g : 2 * g + 2], x[:, 3 * g : 3 * g + 3] @ w.T + b)
    # a fresh nn.Linear(3, 2)'s initial law: uniform in ±1/sqrt(3)
    assert layer.weight.abs().max() <= 1 / math.sqrt(3)
    with pytest.raises(ValueError, match="do not split into 4 groups"):
        PackedLinear(10, 8, groups=4)


@pytest.mark.parametrize("bias", [True, False])
def test_a_packed_convolution_is_torchs_grouped_convolution(bias):
    """The CPU path (groups one by one) gives torch's grouped convolution."""
    with seeded(0):
        conv = PackedConv2d(8, 12, 3, stride=2, padding=1, groups=4, bias=bias)
    x = torch.randn(3, 8, 9, 9)
    expected = F.conv2d(x, conv.weight, conv.bias, 2, 1, 1, 4)
    torch.testing.assert_close(conv(x), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gamma", [1, 2])
def test_packed_pass_is_m_separate_networks_and_their_mixture(gamma):
    """Each member cut out as plain nn.Linear/nn.Conv2d/batch norm layers with its own weights
    (members owning disjoint blocks of every layer) gives the packed pass's member output; the
    predictive is their equal-weight mixture (mean of the softmaxes)."""
    net = torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.AvgPool2d(2), torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 3, 6),
        torch.nn.Tanh(), torch.nn.Linear(6, 3),
    )  # fmt: skip
    method = bayesify.PackedEnsemble(net, task="classification", members=2, gamma=gamma)
    bn = method.net[1]
    with torch.no_grad():  # running statistics that differ per channel
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    x = torch.randn(7, 2, 6, 6)
    method.net.eval()
    with torch.no_grad():
        packed = members_first(method.net(x), 2)  # [M, N, C]
        one_by_one = []
        for m in range(2):
            member = member_network(method.net, m, 2).eval()
            assert not any(isinstance(k, PackedLinear) for k in member.modules())
            one_by_one.append(member(x))
    torch.testing.assert_close(packed, torch.stack(one_by_one), rtol=1e-5, atol=1e-6)
    pred = method.predict(x, samples=2)
    mixture = torch.stack(one_by_one).softmax(-1).mean(0)
    torch.testing.assert_close(pred.mean, mixture, rtol=1e-5, atol=1e-6)
    # no weight connects two members: member 1's output ignores member 0's weights
    with torch.no_grad():
        for layer in method.net:
            if isinstance(layer, PackedLinear | torch.nn.Conv2d) and layer is not method.net[0]:
                w = layer.weight
                w[: len(w) // 2].normal_()
        after = members_first(method.net(x), 2)
    torch.testing.assert_close(after[1], packed[1])
    assert not torch.allclose(after[0], packed[0])


def test_widths_groups_and_parameters():
    """alpha=2, M=4 on 16-unit hidden layers: 32 units in 4 members of 8; gamma=2 halves the
    hidden-to-hidden weights; the first layer reads the whole input, the last gives 4 x out."""
    net = mlp(5, 3, (16, 16), norm=None)
    m1 = bayesify.PackedEnsemble(net, members=4, alpha=2, gamma=1)
    first, hidden, last = (k for k in m1.net if isinstance(k, PackedLinear | torch.nn.Linear))
    assert type(first) is torch.nn.Linear  # one group: a plain dense layer on the input
    assert (first.in_features, first.out_features) == (5, 32)
    assert (hidden.in_features, hidden.out_features, hidden.groups) == (32, 32, 4)
    assert (last.in_features, last.out_features, last.groups) == (32, 12, 4)
    # each member: a 5-8-8-3 network; 4 of them
    per_member = (5 * 8 + 8) + (8 * 8 + 8) + (8 * 3 + 3)
    assert sum(p.numel() for p in m1.net.parameters()) == 4 * per_member
    m2 = bayesify.PackedEnsemble(net, members=4, alpha=2, gamma=2)
    assert [k.groups for k in m2.net if isinstance(k, PackedLinear)] == [8, 4]
    assert m2.net[2].weight.numel() == 32 * 32 // 8
    # widths that do not divide are rounded up to a multiple of M * gamma
    m3 = bayesify.PackedEnsemble(mlp(5, 1, (10,), norm=None), members=3, alpha=1.5)
    assert m3.net[0].out_features == 15 and m3.net[2].in_features == 15


def test_objective_is_the_mean_of_the_members_losses():
    torch.manual_seed(0)
    m = bayesify.PackedEnsemble(mlp(3, 1, (8,), norm=None), members=3)
    x, y = torch.randn(7, 3), torch.randn(7)
    with torch.no_grad():
        loss = m.objective(x, y, 0.0, 7)
        each = [F.mse_loss(m.member(k)(x).squeeze(-1), y) for k in range(3)]
    torch.testing.assert_close(loss, sum(each) / 3)
    c = bayesify.PackedEnsemble(mlp(3, 4, (8,), norm=None), members=2, task="classification")
    labels = torch.tensor([0, 3, 1, 2, 2, 0, 1])
    with torch.no_grad():
        loss = c.objective(x, labels, 0.0, 7)
        each = [F.cross_entropy(c.member(k)(x), labels) for k in range(2)]
    torch.testing.assert_close(loss, sum(each) / 2)


def test_members_start_independent_and_seeded():
    net = mlp(4, 1, (8,), norm=None)
    a = bayesify.PackedEnsemble(net, init_seed=1)
    b = bayesify.PackedEnsemble(net, init_seed=1)
    c = bayesify.PackedEnsemble(net, init_seed=2)
    for pa, pb, pc in zip(a.net.parameters(), b.net.parameters(), c.net.parameters(), strict=True):
        assert torch.equal(pa, pb) and not torch.equal(pa, pc)
    w0, w1 = a.member(0)[0].weight, a.member(1)[0].weight
    assert not torch.equal(w0, w1)
    state = torch.random.get_rng_state()
    bayesify.PackedEnsemble(net)
    assert torch.equal(state, torch.random.get_rng_state())  # the global RNG untouched


def test_t_is_always_m_and_adaptive_sampling_draws_no_repeats():
    """Asking for fewer samples than members gives all M (equal weights); asking for more gives
    the same M (repeats would add nothing); adaptive sampling answers with the M members and
    samples_used M, the mixture being exact."""
    m, x = TestPackedEnsembleRegression().make()
    assert [m.sample_count(t) for t in (1, 4, 50)] == [4, 4, 4]
    few, many = m.predict(x, samples=2), m.predict(x, samples=50)
    assert few.num_samples == many.num_samples == 4
    torch.testing.assert_close(few.samples, many.samples, rtol=0, atol=0)
    torch.testing.assert_close(m.sample(x, 50), m.reference_samples(x, 50), rtol=1e-5, atol=1e-6)
    adaptive = m.predict(x, samples="adaptive", tol=1e-9, start=2, max_samples=64)
    assert adaptive.num_samples == 4 and adaptive.samples_used.tolist() == [4] * len(x)
    torch.testing.assert_close(adaptive.samples, many.samples, rtol=0, atol=0)
    with pytest.raises(ValueError, match="needs tol"):
        m.predict(x, samples="adaptive")
    with pytest.raises(ValueError, match="power of two"):
        m.predict(x, samples="adaptive", tol=0.1, start=8, max_samples=12)


def test_the_default_carries_uncertainty_on_a_toy():
    """Trained with the defaults on a 1-D toy with a gap, the members disagree: the epistemic
    share is well above the 1% under which it counts as negligible, and the spread grows in
    the gap and far from the data."""
    g = torch.Generator().manual_seed(0)
    x = torch.cat(
        [torch.rand(128, 1, generator=g) * 1.5 - 2, torch.rand(128, 1, generator=g) * 1.5 + 0.5]
    )
    y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(256, generator=g)
    perm = torch.randperm(256, generator=g)
    x, y = x[perm], y[perm]
    method = bayesify.PackedEnsemble(mlp(1, 1, (32, 32), norm=None))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NegligibleSpreadWarning)
        method.fit((x[:200], y[:200]), val=(x[200:], y[200:]), epochs=100, lr=1e-2,
                   batch_size=32, seed=0, progress=False)  # fmt: skip
    assert method.noise_variance < 0.05  # a fit, not members that never learned
    assert method.epistemic_share > 0.01
    inside = method.predict(torch.linspace(-1.8, -0.7, 50)[:, None])
    gap = method.predict(torch.linspace(-0.3, 0.3, 20)[:, None])
    outside = method.predict(torch.linspace(4, 6, 50)[:, None])
    assert epistemic_share(inside) > 0.01
    spread = inside.samples.std(0).mean()
    assert gap.samples.std(0).mean() > 2 * spread and outside.samples.std(0).mean() > 5 * spread


def test_the_callers_network_is_untouched_and_inplace_packs_it():
    net = mlp(3, 1, (8,), norm="batch")
    before = copy.deepcopy(net.state_dict())
    method = bayesify.PackedEnsemble(net)
    assert [type(k) for k in net] == [torch.nn.Linear, torch.nn.BatchNorm1d, torch.nn.ReLU,
                                      torch.nn.Linear]  # fmt: skip
    assert all(torch.equal(net.state_dict()[k], v) for k, v in before.items())
    inplace = bayesify.PackedEnsemble(net, inplace=True)
    assert inplace.net is net and net[0].out_features == 16 and isinstance(net[3], PackedLinear)
    assert method.net is not net


def test_refusals_are_one_line_errors():
    with pytest.raises(ValueError, match="members must be >= 2"):
        bayesify.PackedEnsemble(mlp(2), members=1)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        bayesify.PackedEnsemble(mlp(2), alpha=0)
    with pytest.raises(ValueError, match="gamma must be >= 1"):
        bayesify.PackedEnsemble(mlp(2), gamma=0)
    with pytest.raises(ValueError, match="LayerNorm would mix members"):
        bayesify.PackedEnsemble(torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.LayerNorm(4),
                                                    torch.nn.Linear(4, 1)))  # fmt: skip
    with pytest.raises(ValueError, match="packs an nn.Sequential"):
        pack_network(torch.nn.Linear(2, 2), 2, 2.0, 1)
    with pytest.raises(ValueError, match="Linear or nn.Conv2d layers"):
        bayesify.PackedEnsemble(torch.nn.Sequential(torch.nn.ReLU()))
    x, y = regression_data()
    with pytest.raises(ValueError, match="have 3 feature"):  # the first layer is checked
        bayesify.PackedEnsemble(mlp(5)).fit((x[:, :3], y), epochs=1, progress=False)
    with pytest.raises(ValueError, match="trained from scratch"):
        bayesify.PackedEnsemble.from_pretrained(mlp(5), val=(x, y))
