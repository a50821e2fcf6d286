"""IBNN: the shared suite, the training split of Algorithm 1, and from_pretrained."""

from __future__ import annotations

import copy

import pytest
import torch
from conformance import MethodConformance

import bayesify
from bayesify.models import lenet, mlp


def regression_data(n: int = 160, d: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] + 0.1 * torch.randn(n, generator=g)
    return x, y


class TestIBNNRegression(MethodConformance):
    def make(self):
        x, y = regression_data()
        method = bayesify.IBNN(mlp(4, hidden=(16, 16), norm=None), components=3, sigma_init=0.1)
        method.fit(
            (x[:128], y[:128]), val=(x[128:], y[128:]), epochs=2, batch_size=16, progress=False
        )
        return method, x[128:150]


class TestIBNNClassification(MethodConformance):
    samples = 8

    def make(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(48, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (48,), generator=g)
        net = lenet(norm=None, width=1)
        method = bayesify.IBNN(net, task="classification", components=4, sigma_init=0.2)
        method.fit((x, y), epochs=1, batch_size=16, progress=False)
        return method, x[:7]


def test_kl_is_annealed_and_variational_group_has_own_lr():
    method = bayesify.IBNN(mlp(3, hidden=(8,), norm=None), variational_lr=0.3, kl_anneal=0.5)
    assert method.beta(0.0) == 0.0 and method.beta(0.25) == 0.5 and method.beta(0.9) == 1.0
    groups = method.param_groups(1e-3, 1e-4)
    var = {id(p) for p in method.variational_parameters()}
    assert groups[0]["lr"] == 0.3 and groups[0]["weight_decay"] == 0.0
    assert {id(p) for p in groups[0]["params"]} == var
    assert not var & {id(p) for p in groups[1]["params"]}
    assert groups[1]["lr"] == 1e-3


@pytest.mark.parametrize("batch", [12, 10])  # K divides B (fused node) or not (gather)
def test_minibatch_split_evenly_over_components(batch):
    method = bayesify.IBNN(
        mlp(3, hidden=(8,), norm=None), components=4, train_samples=3, sigma_init=1e-6,
        mu_init_std=1.0,
    )  # fmt: skip
    layer = method.layers[0]
    comps = layer.training_components(3 * batch)
    assert comps.shape == (3 * batch,)  # S * B rows
    expected = torch.arange(batch) * 4 // batch
    assert torch.equal(comps, expected.repeat(3))
    if batch == 12:
        assert torch.equal(expected, torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]))
    seen = []
    hook = layer.register_forward_hook(lambda m, i, o: seen.append(o / i[0]))
    x = torch.rand(batch, 3) + 0.5
    method.objective(x, torch.randn(batch), 0.5, 100)
    hook.remove()
    z = seen[0]  # [S*B, F]: the noise each row got, σ ≈ 0 so z ≈ μ of its component
    torch.testing.assert_close(z, layer.mu.detach()[comps], atol=1e-4, rtol=0)
    assert not layer.train_noise


def test_from_pretrained_keeps_weights_when_frozen():
    x, y = regression_data()
    net = mlp(4, hidden=(8,), norm=None)
    before = copy.deepcopy(net.state_dict())
    method = bayesify.IBNN.from_pretrained(net, (x, y), epochs=1, batch_size=32)
    mus = [layer.mu.detach().clone() for layer in method.layers]
    for name, v in before.items():
        prefix, _, leaf = name.rpartition(".")
        torch.testing.assert_close(method.net.state_dict()[f"{prefix}.1.{leaf}"], v)
    assert any((m - 1).abs().max() > 0 for m in mus)
    tuned = bayesify.IBNN.from_pretrained(
        mlp(4, hidden=(8,), norm=None), (x, y), epochs=1, finetune_lr=1e-3
    )
    assert len(tuned.param_groups(1e-3, 0.0)) == 2


def test_bad_config_names_the_option():
    with pytest.raises(ValueError, match="components"):
        bayesify.IBNN(mlp(3, norm=None), components=0)
    with pytest.raises(ValueError, match="kl_anneal"):
        bayesify.IBNN(mlp(3, norm=None), kl_anneal=2.0)


@pytest.mark.parametrize("t", [4, 5, 2])
def test_components_weigh_the_same_whatever_t(t):
    """K = 3 near-deterministic components (σ ≈ 0): the predictive mean is the average of the
    K component outputs (T = K samples, one group each) for any T."""
    method = bayesify.IBNN(
        mlp(4, hidden=(8,), norm=None), components=3, sigma_init=1e-7, mu_init_std=0.5
    )
    x = torch.randn(6, 4)
    per_component = method.sample(x, 3, seed=0).squeeze(-1)  # [K, N]: group k = component k
    assert (per_component[0] - per_component[1]).abs().max() > 1e-3
    method.noise_variance = 0.1
    pred = method.predict(x, samples=t, seed=1)
    assert pred.num_samples == 3 * -(-t // 3)
    torch.testing.assert_close(pred.mean, per_component.mean(0), rtol=1e-5, atol=1e-5)
