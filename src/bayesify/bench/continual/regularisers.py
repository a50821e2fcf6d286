"""Continual-learning baselines that are not Bayesian predictives: fine-tuning (no penalty),
EWC (Kirkpatrick et al. 2017) and SI (Zenke et al. 2017), each a quadratic penalty pulling the
weights towards those of the previous tasks, trained by the one training loop.

EWC: after each task, the diagonal empirical Fisher F = mean over the task's rows of
(∂ log p(y|x) / ∂θ)², y the observed label, is added to the Fisher of the earlier tasks and the
anchor θ* becomes the current weights; penalty λ/2 Σ F (θ − θ*)².

SI: during a task, ω −= g · Δθ after every optimiser step (g the gradient of the task's loss
alone at the weights before the step, Δθ the step); at its end Ω += ω / (Δ² + ξ) with Δ the
task's total move, θ* the current weights, ω reset; penalty c Σ Ω (θ − θ*)².
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.train.loop import as_loader, make_optimizer, train_loop

__all__ = ["EWC", "SI", "Penalty", "empirical_fisher", "train_task"]


def _params(net: nn.Module) -> dict[str, Tensor]:
    return {k: p for k, p in net.named_parameters() if p.requires_grad}


def empirical_fisher(net: nn.Module, x: Tensor, y: Tensor, chunk: int = 256) -> dict[str, Tensor]:
    """The diagonal empirical Fisher of a classifier: per parameter, the mean over the rows of
    ``x [N, D]`` of the squared gradient of ``log softmax(net(x_n))[y_n]`` (observed labels)."""
    from torch.func import functional_call, grad, vmap

    params = {k: p.detach() for k, p in _params(net).items()}

    def log_lik(p: dict[str, Tensor], xi: Tensor, yi: Tensor) -> Tensor:
        logits = functional_call(net, p, (xi.unsqueeze(0),))
        return F.log_softmax(logits, -1)[0].gather(0, yi.reshape(1))[0]

    per_row = vmap(grad(log_lik), in_dims=(None, 0, 0))
    total = {k: torch.zeros_like(p) for k, p in params.items()}
    was_training = net.training
    net.eval()
    try:
        for i in range(0, len(y), chunk):
            g = per_row(params, x[i : i + chunk], y[i : i + chunk])
            for k in total:
                total[k] += g[k].pow(2).sum(0)
    finally:
        net.train(was_training)
    return {k: v / len(y) for k, v in total.items()}


class Penalty:
    """No penalty (fine-tuning); the base of EWC and SI."""

    def __init__(self, net: nn.Module) -> None:
        self.net = net

    def penalty(self) -> Tensor:
        return torch.zeros(())

    def start_task(self) -> None:
        """Called before a task's training."""

    def after_step(self) -> None:
        """Called after every optimiser step."""

    def end_task(self, x: Tensor, y: Tensor) -> None:
        """Called after a task's training with its rows ``x [N, D]``, ``y [N]``."""


class _Anchored(Penalty):
    """A penalty ``scale Σ weight (θ − θ*)²`` over the network's parameters."""

    scale = 1.0

    def __init__(self, net: nn.Module) -> None:
        super().__init__(net)
        self.weight = {k: torch.zeros_like(p) for k, p in _params(net).items()}
        self.anchor = {k: p.detach().clone() for k, p in _params(net).items()}

    def penalty(self) -> Tensor:
        terms = [
            (self.weight[k] * (p - self.anchor[k]).pow(2)).sum()
            for k, p in _params(self.net).items()
        ]
        return self.scale * torch.stack(terms).sum()

    def _anchor_here(self) -> None:
        self.anchor = {k: p.detach().clone() for k, p in _params(self.net).items()}


class EWC(_Anchored):
    """Elastic weight consolidation, Fishers summed over tasks, anchored at the last task's
    weights; ``lam`` is λ of λ/2 Σ F (θ − θ*)²."""

    def __init__(self, net: nn.Module, lam: float) -> None:
        super().__init__(net)
        self.scale = lam / 2

    def end_task(self, x: Tensor, y: Tensor) -> None:
        for k, f in empirical_fisher(self.net, x, y).items():
            self.weight[k] += f
        self._anchor_here()


class SI(_Anchored):
    """Synaptic intelligence: ``c`` Σ Ω (θ − θ*)², Ω the path integrals over the tasks so far,
    each divided by (Δ² + ``xi``)."""

    def __init__(self, net: nn.Module, c: float, xi: float = 1e-3) -> None:
        super().__init__(net)
        self.scale, self.xi = c, xi
        self.omega = {k: torch.zeros_like(p) for k, p in self.weight.items()}
        self.start = self.previous = self.anchor

    def start_task(self) -> None:
        self.start = {k: p.detach().clone() for k, p in _params(self.net).items()}
        self.previous = self.start

    def after_step(self) -> None:
        now = {k: p.detach().clone() for k, p in _params(self.net).items()}
        for k, p in _params(self.net).items():
            if p.grad is None:
                continue
            before = self.previous[k]
            # the step's gradient less the penalty's own, 2 c Ω (θ − θ*) at the same weights
            task_grad = p.grad - 2 * self.scale * self.weight[k] * (before - self.anchor[k])
            self.omega[k] -= task_grad * (now[k] - before)
        self.previous = now

    def end_task(self, x: Tensor, y: Tensor) -> None:
        for k, p in _params(self.net).items():
            delta = p.detach() - self.start[k]
            self.weight[k] += self.omega[k] / (delta.pow(2) + self.xi)
            self.omega[k].zero_()
        self._anchor_here()


def train_task(
    net: nn.Module,
    x: Tensor,
    y: Tensor,
    reg: Penalty,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    loss: Callable[[Tensor, Tensor], Tensor] = F.cross_entropy,
) -> None:
    """Train ``net`` on one task's rows ``x [N, D]``, ``y [N]`` by Adam through the one loop,
    minimising the task's mean loss plus ``reg``'s penalty; ``reg`` is told of the task's start,
    every step and its end."""
    reg.start_task()
    loader = as_loader((x, y), batch_size, shuffle=True, seed=seed)
    opt = make_optimizer([{"params": list(_params(net).values())}], "adam", lr)
    train_loop(
        net,
        lambda xb, yb, _: loss(net(xb), yb) + reg.penalty(),
        loader,
        opt,
        epochs=epochs,
        after_step=reg.after_step,
        progress=False,
    )
    reg.end_task(x, y)
