"""BatchEnsemble: the shared suite, each member against its explicit weight W ∘ s rᵀ, the
training objective against the members' losses one by one, the spread of the default, and
``from_pretrained``."""

from __future__ import annotations

import copy
import functools
import warnings

import pytest
import torch
import torch.nn.functional as F
from conformance import MethodConformance, fitted_lenet, fitted_regression
from test_mcbn import regression_data

import bayesify
from bayesify.methods.core.spread import NegligibleSpreadWarning, epistemic_share
from bayesify.models import mlp
from bayesify.nn import sampling
from bayesify.nn.batch_ensemble import BatchEnsembleLayer, member_forward_reference


class TestBatchEnsembleRegression(MethodConformance):
    samples = 4  # T is always M

    def make(self):
        return fitted_regression(bayesify.BatchEnsemble)


class TestBatchEnsembleConvClassificationWithBN(MethodConformance):
    samples = 3

    def make(self):
        return fitted_lenet(bayesify.BatchEnsemble, members=3)


@pytest.mark.parametrize(
    ("layer", "n"),
    [
        (torch.nn.Linear(6, 4), 2),  # few rows: the members' factors applied to the rows
        (torch.nn.Linear(6, 4), 9),  # more: each group's weight W ∘ s rᵀ built, one bmm
        (torch.nn.Conv2d(3, 5, 3, padding=1, stride=2), 2),
    ],
)
def test_each_group_runs_its_member_with_the_explicit_weight(layer, n):
    be = BatchEnsembleLayer(copy.deepcopy(layer), members=3)
    be.init_fast_weights("normal", 0.5, torch.Generator().manual_seed(0))
    assert torch.equal(be.layer.weight, layer.weight)  # W is the layer's weight
    assert torch.equal(be.bias, layer.bias.expand(3, -1))  # every member starts at its bias
    x = torch.randn(n, 6) if isinstance(layer, torch.nn.Linear) else torch.randn(n, 3, 7, 7)
    with torch.no_grad(), sampling(be, 5):  # 5 groups: members 0, 1, 2, 0, 1
        out = be(x.repeat(5, *(1,) * (x.dim() - 1)))
        out = out.reshape(5, n, *out.shape[1:])
        for g in range(5):
            torch.testing.assert_close(out[g], member_forward_reference(be, x, g % 3))
        be.select_groups(2, 4)  # groups 2, 3 alone: members 2, 0
        out = be(torch.cat([x, x]))
        torch.testing.assert_close(out[:n], member_forward_reference(be, x, 2))
        torch.testing.assert_close(out[n:], member_forward_reference(be, x, 0))
    with torch.no_grad():  # outside a sampling block: member 0
        torch.testing.assert_close(be(x), member_forward_reference(be, x, 0))


def test_fast_weight_inits_and_the_extra_parameters():
    net = mlp(4, 1, (8,), norm=None)
    m = bayesify.BatchEnsemble(net, members=4, init="sign", init_seed=1)
    for layer in m.layers:
        for p in (layer.r, layer.s):
            assert set(p.detach().unique().tolist()) == {-1.0, 1.0}
            assert not torch.equal(p[0], p[1])  # members differ from the start
    normal = bayesify.BatchEnsemble(net, members=64, init="normal", init_std=0.5)
    r = torch.cat([layer.r.detach().flatten() for layer in normal.layers])
    assert abs(r.mean().item() - 1.0) < 0.05 and abs(r.std().item() - 0.5) < 0.05
    # per member and layer: r (in), s (out) and a bias (out) besides the one shared W
    extra = sum(p.numel() for p in m.net.parameters()) - sum(p.numel() for p in net.parameters())
    assert extra == 4 * (4 + 2 * 8 + 8 + 2 * 1) - (8 + 1)  # the shared biases became per-member


@pytest.mark.parametrize("member_batch", ["repeat", "split"])
def test_objective_is_the_mean_of_the_members_losses(member_batch):
    torch.manual_seed(0)
    m = bayesify.BatchEnsemble(mlp(3, 1, (8,), norm=None), members=3, member_batch=member_batch)
    x, y = torch.randn(7, 3), torch.randn(7)
    with torch.no_grad():
        loss = m.objective(x, y, 0.0, 7)
    parts = [(x, y)] * 3 if member_batch == "repeat" else [(x[i:i + 2], y[i:i + 2])
                                                          for i in (0, 2, 4)]  # fmt: skip
    per_member = []
    for k, (xk, yk) in enumerate(parts):
        h = xk
        for module in m.net:
            if isinstance(module, BatchEnsembleLayer):
                h = member_forward_reference(module, h, k)
            else:
                h = module(h)
        per_member.append(F.mse_loss(h.squeeze(-1), yk, reduction="sum"))
    expected = sum(per_member) / sum(len(p[1]) for p in parts)
    torch.testing.assert_close(loss, expected)


def test_t_is_always_m_and_the_samples_are_the_members_one_by_one():
    """Whatever T is asked for, the samples are the M members once each (their mixture is
    exact), sample m being member m run alone with its explicit weights; adaptive sampling
    answers with them and samples_used M."""
    m, x = TestBatchEnsembleRegression().make()
    assert [m.sample_count(t) for t in (1, 4, 6, 100)] == [4, 4, 4, 4]
    few, many = m.predict(x, samples=2), m.predict(x, samples=100)
    assert few.num_samples == many.num_samples == 4
    torch.testing.assert_close(few.samples, many.samples, rtol=0, atol=0)
    with torch.no_grad():
        ref = torch.stack([member_net(m, i)(x) for i in range(4)])[..., 0]
    torch.testing.assert_close(many.samples, ref, rtol=1e-5, atol=1e-6)
    assert (many.samples.std(0) > 0).all()
    adaptive = m.predict(x, samples="adaptive", tol=1e-9, start=2, max_samples=64)
    assert adaptive.num_samples == 4 and adaptive.samples_used.tolist() == [4] * len(x)
    torch.testing.assert_close(adaptive.samples, many.samples, rtol=0, atol=0)


def member_net(method, i):
    """Member ``i`` of a BatchEnsemble as a plain network: a copy whose every converted layer
    runs :func:`member_forward_reference` (its explicit weight W ∘ s_i r_iᵀ and bias b_i)."""
    net = copy.deepcopy(method.net).eval()
    for mod in net.modules():
        if isinstance(mod, BatchEnsembleLayer):
            mod.forward = functools.partial(member_forward_reference, mod, member=i)
    return net


def test_the_default_carries_uncertainty_on_a_toy():
    """Trained with the defaults on a 1-D toy, the members disagree: the epistemic share of the
    predictive is well above the 1% under which the spread counts as negligible, largest away
    from the data."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(256, 1, generator=g) * 4 - 2
    y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(256, generator=g)
    torch.manual_seed(0)
    method = bayesify.BatchEnsemble(mlp(1, 1, (32, 32), norm=None))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NegligibleSpreadWarning)
        method.fit((x[:200], y[:200]), val=(x[200:], y[200:]), epochs=60, batch_size=32,
                   progress=False)  # fmt: skip
    assert method.epistemic_share > 0.05
    inside = method.predict(torch.linspace(-1.5, 1.5, 50)[:, None], samples=4, seed=0)
    outside = method.predict(torch.linspace(4, 6, 50)[:, None], samples=4, seed=0)
    assert epistemic_share(inside) > 0.01
    assert outside.samples.std(0).mean() > 3 * inside.samples.std(0).mean()


def test_from_pretrained_starts_from_the_trained_weights_and_leaves_the_net_alone():
    x, y = regression_data()
    torch.manual_seed(0)
    net = mlp(5, 1, (16,), norm=None)
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    for _ in range(200):
        opt.zero_grad()
        F.mse_loss(net(x[:200]).squeeze(-1), y[:200]).backward()
        opt.step()
    before = copy.deepcopy(net.state_dict())
    kept = bayesify.BatchEnsemble.from_pretrained(net, val=(x[200:], y[200:]), epochs=0)
    for layer, plain in zip(kept.layers, [net[0], net[2]], strict=True):
        assert torch.equal(layer.layer.weight, plain.weight)
        assert torch.equal(layer.bias, plain.bias.expand_as(layer.bias))
    tuned = bayesify.BatchEnsemble.from_pretrained(
        net, (x[:200], y[:200]), val=(x[200:], y[200:]), epochs=5, batch_size=16
    )
    for k, v in before.items():
        assert torch.equal(net.state_dict()[k], v), k
    pred = tuned.predict(x[200:], samples=4, seed=0)
    untuned = kept.predict(x[200:], samples=4, seed=0)
    # the fast weights' N(1, 0.5²) start perturbs the trained net; fine-tuning recovers it
    mse = F.mse_loss(pred.mean, y[200:]).item()
    assert mse < F.mse_loss(untuned.mean, y[200:]).item() and mse < 0.25 * y[200:].var().item()
    assert epistemic_share(pred) > 0.01
    with pytest.raises(ValueError, match="needs training data"):
        bayesify.BatchEnsemble.from_pretrained(net, val=(x, y))


@pytest.mark.parametrize("fast_lr", [0.0, 0.1, 1.0])
def test_the_fast_weights_train_at_their_own_rate_without_weight_decay(fast_lr):
    """``fit`` against one hand-written Adam step per group: the fast weights at lr·fast_lr with
    no weight decay (0: they keep their draw), every other parameter at lr with it."""
    x, y = regression_data()
    torch.manual_seed(0)
    method = bayesify.BatchEnsemble(mlp(5, 1, (8,), norm=None), fast_lr=fast_lr)
    ref = copy.deepcopy(method)
    r0 = method.layers[0].r.detach().clone()
    method.fit((x[:32], y[:32]), epochs=1, batch_size=32, lr=0.01, weight_decay=0.1,
               progress=False)  # fmt: skip
    fast = [p for layer in ref.layers for p in (layer.r, layer.s)]
    slow = [p for n, p in ref.net.named_parameters() if not n.endswith((".r", ".s"))]
    opt = torch.optim.Adam([{"params": fast, "lr": 0.01 * fast_lr, "weight_decay": 0.0},
                            {"params": slow, "lr": 0.01, "weight_decay": 0.1}])  # fmt: skip
    torch.manual_seed(0)
    ref.net.train()
    ref.objective(x[:32], y[:32], 0.0, 32).backward()
    opt.step()
    for (name, p), q in zip(method.net.named_parameters(), ref.net.parameters(), strict=True):
        torch.testing.assert_close(p, q, msg=name)
    assert torch.equal(method.layers[0].r, r0) == (fast_lr == 0)


def test_bad_options_are_one_line_errors():
    with pytest.raises(ValueError, match="members must be >= 1"):
        bayesify.BatchEnsemble(mlp(2), members=0)
    with pytest.raises(ValueError, match="unknown init 'uniform'"):
        bayesify.BatchEnsemble(mlp(2), init="uniform")
    with pytest.raises(ValueError, match="fast_lr must be >= 0"):
        bayesify.BatchEnsemble(mlp(2), fast_lr=-1)
    with pytest.raises(ValueError, match="nn.Linear or nn.Conv2d"):
        bayesify.BatchEnsemble(torch.nn.Sequential(torch.nn.ReLU()))
