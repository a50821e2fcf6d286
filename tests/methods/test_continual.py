"""Variational continual learning: the prior is the previous posterior, VCL keeps a task that
fine-tuning forgets, coresets, multi-head networks, bundles with the task history."""

from __future__ import annotations

import pytest
import torch
from conformance import MethodConformance
from torch import nn
from torch.distributions import Normal, kl_divergence

import bayesify
from bayesify.methods.continual.coreset import select_coreset
from bayesify.models import multihead_mlp, use_head
from bayesify.nn.posterior_prior import prior_kl

FIT = dict(batch_size=64, lr=3e-2, progress=False)


def two_tasks(n: int = 200) -> tuple[tuple[torch.Tensor, ...], ...]:
    """Task A: label x0 > 0 on inputs shifted up; task B: the opposite rule on inputs shifted
    down (one network can do both; training on B alone undoes A). ``(train, test)`` each."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4 * n, 2, generator=g)
    xa, xb = x[: 2 * n] + torch.tensor([0.0, 4.0]), x[2 * n :] - torch.tensor([0.0, 4.0])
    ya, yb = (xa[:, 0] > 0).long(), (xb[:, 0] < 0).long()
    return (xa[:n], ya[:n], xa[n:], ya[n:]), (xb[:n], yb[:n], xb[n:], yb[n:])


def small_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))


def accuracy(method, x, y, **kw) -> float:
    return float((method.predict(x, 20, seed=0, **kw).mean.argmax(-1) == y).float().mean())


class TestVCLConformance(MethodConformance):
    def make(self):
        (xa, ya, _, _), (xb, yb, _, _) = two_tasks(64)
        xa, xb = torch.cat([xa, -xa], 1), torch.cat([xb, -xb], 1)  # 4 features per row
        method = bayesify.VCL(multihead_mlp(4, 2, (8,), heads=2), task="classification",
                              coreset="random", coreset_size=8, init_rho=-3)  # fmt: skip
        method.fit((xa, ya), epochs=1, **FIT)
        method.fit((xb, yb), epochs=1, **FIT)
        return method, xa[:10]


def test_prior_is_the_previous_posterior_and_the_kl_is_the_closed_form():
    (xa, ya, _, _), (xb, yb, _, _) = two_tasks(64)
    vcl = bayesify.VCL(small_net(), task="classification", init_rho=-3, prior_sigma=0.5)
    first = prior_kl(vcl.layers)  # against N(0, 0.5²) before any task
    ref = sum(
        kl_divergence(Normal(m, s), Normal(0.0, 0.5)).sum()
        for layer in vcl.layers
        for m, s in ((layer.weight_mu, layer.weight_sigma), (layer.bias_mu, layer.bias_sigma))
    )
    torch.testing.assert_close(first, ref)
    vcl.fit((xa, ya), epochs=2, **FIT)
    frozen = {
        id(layer): [(m.detach().clone(), s.detach().clone()) for m, s in layer._pairs()]
        for layer in vcl.layers
    }
    for layer in vcl.layers:  # the prior buffers are the posterior after task A
        torch.testing.assert_close(layer.prior_weight_mu, layer.weight_mu.detach())
        torch.testing.assert_close(layer.prior_weight_sigma, layer.weight_sigma.detach())
    with torch.no_grad():  # move the posterior away from the frozen prior
        for layer in vcl.layers:
            for p in layer.parameters():
                p.add_(0.1 * torch.randn_like(p))
    expected = sum(
        kl_divergence(Normal(m, s), Normal(pm, ps)).sum()
        for layer in vcl.layers
        for (m, s), (pm, ps) in zip(layer._pairs(), frozen[id(layer)], strict=True)
    )
    torch.testing.assert_close(prior_kl(vcl.layers), expected)
    # the ELBO's KL term is that KL over N (not the KL to N(0, σ²) the layers compute)
    vcl.net.train()
    torch.manual_seed(1)
    loss = vcl.objective(xb, yb, 1.0, 100)
    torch.manual_seed(1)
    nll = vcl.nll(vcl.net(xb), yb)
    torch.testing.assert_close(loss - nll, expected / 100, rtol=1e-4, atol=1e-6)


def test_vcl_keeps_the_first_task_where_fine_tuning_forgets_it():
    (xa, ya, xat, yat), (xb, yb, xbt, ybt) = two_tasks()
    plain = bayesify.Deterministic(small_net(), task="classification")
    plain.fit((xa, ya), epochs=30, **FIT)
    assert accuracy(plain, xat, yat) > 0.95
    plain.fit((xb, yb), epochs=30, **FIT)
    vcl = bayesify.VCL(small_net(), task="classification", init_rho=-3, prior_sigma=0.3)
    vcl.fit((xa, ya), epochs=30, **FIT)
    vcl.fit((xb, yb), epochs=30, **FIT)
    assert accuracy(plain, xat, yat) < 0.8  # forgotten
    assert accuracy(vcl, xat, yat) > 0.9  # kept
    assert accuracy(vcl, xbt, ybt) > 0.9  # and the new task learned
    assert [t["task"] for t in vcl.tasks] == [0, 1]


def test_k_center_picks_one_row_per_far_cluster():
    g = torch.Generator().manual_seed(0)
    centres = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])
    x = (centres[:, None, :] + 0.1 * torch.randn(4, 25, 2, generator=g)).reshape(100, 2)
    picked = select_coreset(x, 4, "k-center", seed=3)
    assert sorted((picked // 25).tolist()) == [0, 1, 2, 3]
    rand = select_coreset(x, 30, "random", seed=3)
    assert len(set(rand.tolist())) == 30 and len(select_coreset(x, 5, "none")) == 0


def test_multi_head_bundle_round_trip_keeps_the_task_history(tmp_path):
    (xa, ya, xat, yat), (xb, yb, _, _) = two_tasks(64)
    vcl = bayesify.VCL(multihead_mlp(2, 2, (8,), heads=3), task="classification",
                       coreset="k-center", coreset_size=6, init_rho=-3)  # fmt: skip
    vcl.fit((xa, ya), epochs=2, **FIT)
    vcl.fit((xb, yb), epochs=2, **FIT)
    x, y, heads = vcl.coreset()
    assert x.shape == (12, 2) and heads.tolist() == [0] * 6 + [1] * 6
    torch.testing.assert_close(x[:6], xa[vcl.tasks[0]["coreset_indices"]])
    vcl.save(tmp_path / "b")
    back = bayesify.load(tmp_path / "b")
    assert back.tasks == vcl.tasks and back.module.head == 1
    for a, b in zip(vcl.coreset(), back.coreset(), strict=True):
        torch.testing.assert_close(a, b)
    for la, lb in zip(vcl.layers, back.layers, strict=True):
        torch.testing.assert_close(la.prior_weight_sigma, lb.prior_weight_sigma)
    torch.testing.assert_close(
        vcl.predict(xat, 10, seed=0, head=0).mean, back.predict(xat, 10, seed=0, head=0).mean
    )
    back.fit((xa, ya), epochs=1, **FIT)  # a third task on head 2, from the bundle
    assert [t["head"] for t in back.tasks] == [0, 1, 2] and back.coreset()[0].shape[0] == 18
    with pytest.raises(ValueError, match="head must be an int in 0..2"):
        back.predict(xat, 2, head=3)
    with use_head(back.module, 0):
        assert back.module.head == 0
    assert back.module.head == 2


def test_config_checks():
    with pytest.raises(ValueError, match="coreset_size > 0"):
        bayesify.VCL(small_net(), task="classification", coreset="random")
    with pytest.raises(ValueError, match="prior must be gaussian"):
        bayesify.VCL(small_net(), task="classification", prior="mixture")


def test_a_new_head_gets_the_first_prior_and_unused_heads_stay_out_of_the_kl():
    """Task 2 on a three-head network: the body and head 0 are held by the posterior after
    task 1, head 1 (new) by N(0, prior_sigma²), head 2 (not used yet) is in no KL term."""
    (xa, ya, _, _), (xb, yb, _, _) = two_tasks(64)
    vcl = bayesify.VCL(multihead_mlp(2, 2, (8,), heads=3), task="classification", init_rho=-3,
                       prior_sigma=0.5)  # fmt: skip
    vcl.fit((xa, ya), epochs=2, **FIT)
    body_and_head0 = [*vcl.module.body.modules(), *vcl.module.heads[0].modules()]
    frozen = {id(layer): [(m.detach().clone(), s.detach().clone()) for m, s in layer._pairs()]
              for layer in vcl.layers if any(layer is m for m in body_and_head0)}  # fmt: skip
    head1, head2 = vcl.module.heads[1], vcl.module.heads[2]
    for head in (head1, head2):  # not trained yet: the first task's prior
        assert head.prior_weight_mu.abs().max() == 0
        assert torch.all(head.prior_weight_sigma == 0.5)

    def expected() -> torch.Tensor:
        total = sum(
            kl_divergence(Normal(m, s), Normal(pm, ps)).sum()
            for layer in vcl.layers
            if id(layer) in frozen
            for (m, s), (pm, ps) in zip(layer._pairs(), frozen[id(layer)], strict=True)
        )
        return total + sum(kl_divergence(Normal(m, s), Normal(0.0, 0.5)).sum()
                           for m, s in head1._pairs())  # fmt: skip

    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    objective = vcl.objective

    def spy(x, y, progress, n_data):
        seen.append((prior_kl(vcl._kl_layers).detach(), expected().detach()))
        return objective(x, y, progress, n_data)

    vcl.objective = spy
    vcl.fit((xb, yb), epochs=2, **FIT)
    assert len(seen) >= 2
    for got, want in seen:
        torch.testing.assert_close(got, want)
    assert seen[-1][1] > seen[0][1]  # training moved q away from its start
