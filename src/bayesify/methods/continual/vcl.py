"""Variational continual learning (Nguyen et al. 2018) with Bayes by Backprop.

Each call of :meth:`VCL.fit` learns one more task. The prior of task t is the posterior after
task t − 1 (for the first task ``N(0, prior_sigma²)``): a mean-field Gaussian with one mean and
one σ per weight, copied and frozen at the end of each task (:mod:`bayesify.nn.posterior_prior`),
and the ELBO's KL is the closed form between the two mean-field Gaussians. Training on task t
starts from the previous posterior.

Coreset (optional, the paper's recipe): before training on task t, ``coreset_size`` of its rows
are set aside (``coreset="random"`` or ``"k-center"``); the propagated posterior q̃_t is trained
on the other rows with the VCL prior and frozen as the next task's prior; the posterior that
predicts is q̃_t fine-tuned on the union of all tasks' coresets (KL to q̃_t). The weights a
bundle holds are that predicting posterior; the prior buffers hold q̃_t, from which the next task
starts. The coreset rows themselves (inputs, targets, head) are saved with the weights, so a
bundle can go on to the next task without the earlier tasks' data.

Multi-head networks (:class:`~bayesify.models.multihead.MultiHeadMLP`: Split MNIST) train head t
on task t by default; ``predict(x, head=t)`` predicts with head t (default: the head of the last
task). Single-head networks (Permuted MNIST) share every weight across tasks.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Self

import torch
from torch import Tensor, nn

from bayesify.methods.bbb.bayes_by_backprop import BayesByBackprop, BBBConfig, kl_weight
from bayesify.methods.continual.coreset import select_coreset
from bayesify.methods.core.inputs import class_labels, data_tensors
from bayesify.models.multihead import head_count, use_head
from bayesify.nn.bayes_layers import BayesLayer
from bayesify.nn.posterior_prior import (
    add_posterior_prior,
    freeze_posterior,
    prior_kl,
    start_from_prior,
)
from bayesify.options import CoresetKind, PriorKind, Task
from bayesify.predictive import Predictive
from bayesify.train import Data

__all__ = ["VCL", "VCLConfig"]

#: buffers on the network holding the coreset union: inputs [K, ...], targets [K], head [K]
CORESET_X, CORESET_Y, CORESET_HEAD = "vcl_coreset_x", "vcl_coreset_y", "vcl_coreset_head"


@dataclass(frozen=True)
class VCLConfig(BBBConfig):
    """Bayes by Backprop's options (the Gaussian prior ``N(0, prior_sigma²)`` is the first task's
    prior), and the coreset: ``coreset`` (``none``, ``random`` or ``k-center``), ``coreset_size``
    rows per task, ``coreset_epochs`` of the prediction-time refit (0: the task's epochs)."""

    coreset: CoresetKind = CoresetKind.NONE
    coreset_size: int = 0
    coreset_epochs: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.prior is not PriorKind.GAUSSIAN:
            raise ValueError("vcl: the first task's prior must be gaussian (prior=gaussian)")
        if self.coreset_size < 0 or self.coreset_epochs < 0:
            raise ValueError("vcl: coreset_size and coreset_epochs must be >= 0")
        if (self.coreset is CoresetKind.NONE) != (self.coreset_size == 0):
            raise ValueError(
                "vcl: give coreset=random or k-center together with coreset_size > 0, or neither"
            )


class VCL(BayesByBackprop):
    """Variational continual learning: Bayes by Backprop whose prior is the last task's posterior.

    ``fit(task_data)`` once per task, in order; ``tasks`` lists what was learned."""

    name = "vcl"
    Config = VCLConfig
    config: VCLConfig

    def _prepare(self, net: nn.Module) -> None:
        norms = sorted({type(m).__name__ for m in net.modules()
                        if isinstance(m, nn.modules.batchnorm._BatchNorm)})  # fmt: skip
        if norms:
            raise ValueError(
                f"vcl: the network has {', '.join(norms)} layers, which have no posterior, so "
                "the previous task's posterior cannot keep them and every task would retrain "
                "them; build the network without batch norm (--norm none)"
            )
        super()._prepare(net)
        add_posterior_prior(self.layers, self.config.prior_sigma)
        ref = self.layers[0].weight_mu
        for name in (CORESET_X, CORESET_Y, CORESET_HEAD):
            net.register_buffer(name, ref.new_zeros(0).detach())
        self.module = net  # the network itself (self.net is a wrapper while training)
        self.tasks: list[dict[str, Any]] = []
        self._kl_layers: list[BayesLayer] = self.layers  # the layers the ELBO's KL covers
        self._mixed_heads = False  # the coreset refit's targets encode the head

    # ------------------------------------------------------------------ training
    def objective(self, x: Tensor, y: Tensor, progress: float, n_data: int) -> Tensor:
        """Mean NLL of the mini-batch + β · kl_weight · KL(q || previous posterior) / N."""
        cfg = self.config
        nll = self._mixed_head_nll(x, y) if self._mixed_heads else self.nll(self.net(x), y)
        for layer in self.layers:  # the forward's KL to N(0, σ²) is not this method's
            layer.take_kl()
        beta = kl_weight(cfg.kl_schedule, progress, cfg.kl_warmup, cfg.kl_cycles)
        if beta * cfg.kl_weight == 0:
            return nll
        return nll + beta * cfg.kl_weight * prior_kl(self._kl_layers) / n_data

    def _mixed_head_nll(self, x: Tensor, y: Tensor) -> Tensor:
        """Mean cross-entropy of rows whose target ``head * C + class`` names their head."""
        classes = self._classes_per_head()
        y = y.long()
        total = x.new_zeros(())
        for h in torch.unique(y // classes).tolist():
            rows = (y // classes) == h
            with use_head(self.module, int(h)):
                out = self.net(x[rows])
            total = total + self.nll(out, y[rows] % classes) * rows.sum()
        return total / len(y)

    def _classes_per_head(self) -> int:
        first: Any = self._heads()[0]  # any module with an int out_features (Linear, BayesLinear)
        return int(first.out_features)

    def _heads(self) -> nn.ModuleList:
        """The output heads of a multi-head network (:func:`head_count` > 1)."""
        heads = self.module.heads
        assert isinstance(heads, nn.ModuleList)  # what head_count counts
        return heads

    def fit(self, train: Data, val: Data | None = None, *, head: int | None = None,
            **options: Any) -> Self:  # fmt: skip
        """Learn the next task from ``train`` (``(X, y)``, a Dataset or DataLoader), with the
        posterior after the previous task as the prior; returns ``self``.

        ``head``: the output head of a multi-head network (default: the task's number). The
        other keyword arguments are :meth:`Method.fit`'s (epochs, batch_size, lr, seed, ...).
        """
        task = len(self.tasks)
        heads = head_count(self.module)
        head = (task if heads > 1 else 0) if head is None else head
        if heads > 1 and self.config.task is not Task.CLASSIFICATION:
            raise ValueError("vcl: a multi-head network is for classification tasks")
        x, y = data_tensors(self._checked_data(train, "training inputs"))
        seed = int(options.get("seed", 0))
        cfg = self.config
        picked = select_coreset(x, cfg.coreset_size, cfg.coreset, seed=seed + task)
        keep = torch.ones(len(x), dtype=torch.bool)
        keep[picked] = False
        if not keep.any():
            raise ValueError(
                f"vcl: task {task} has {len(x)} rows, all of them in the coreset "
                f"(coreset_size={cfg.coreset_size}); give more rows or a smaller coreset"
            )
        trained = {t["head"] for t in self.tasks}
        # start from the propagated posterior q̃_{t-1} (not the coreset refit); a head not
        # trained yet keeps its initialisation, and its prior stays N(0, prior_sigma²)
        if self.tasks:
            start_from_prior(self._layers_of(trained))
        self._kl_layers = self._layers_of(trained | {head})
        with use_head(self.module, head):
            super().fit((x[keep], y[keep]), val, **options)
        freeze_posterior(self._kl_layers)
        history = self.history
        if len(picked):
            self._add_coreset(x[picked], y[picked], head)
            self._refit_on_coreset(options)
            self.history = history
        self._kl_layers = self.layers
        if hasattr(self.module, "head"):
            setattr(self.module, "head", head)  # noqa: B010 (nn.Module types attributes as Tensor | Module)
        self.tasks.append({
            "task": task, "head": head, "rows": len(x), "trained_rows": int(keep.sum()),
            "coreset": cfg.coreset.value, "coreset_rows": len(picked),
            "coreset_indices": picked.tolist(),
            "epochs": history.epochs if history is not None else 0,
        })  # fmt: skip
        return self

    def _layers_of(self, heads: set[int]) -> list[BayesLayer]:
        """The Bayesian layers of the shared body and of output heads ``heads`` (all layers of
        a single-head network)."""
        if head_count(self.module) == 1:
            return self.layers
        other = {id(m) for h, mod in enumerate(self._heads()) if h not in heads
                 for m in mod.modules()}  # fmt: skip
        return [layer for layer in self.layers if id(layer) not in other]

    def _add_coreset(self, x: Tensor, y: Tensor, head: int) -> None:
        net, dtype = self.module, self.layers[0].weight_mu.dtype
        old_x, old_y, old_head = (net.get_buffer(n) for n in (CORESET_X, CORESET_Y, CORESET_HEAD))
        rows = x.to(old_x.device, dtype)
        net.vcl_coreset_x = torch.cat([old_x.reshape(-1, *rows.shape[1:]), rows])
        net.vcl_coreset_y = torch.cat([old_y, y.to(rows.device, dtype).reshape(-1)])
        new_head = torch.full((len(x),), float(head), dtype=dtype, device=rows.device)
        net.vcl_coreset_head = torch.cat([old_head, new_head])

    def coreset(self) -> tuple[Tensor, Tensor, Tensor]:
        """The coreset union: inputs ``[K, ...]``, targets ``[K]``, heads ``[K]`` (int64)."""
        net = self.module
        shape = self.input_shape or ()
        x = net.get_buffer(CORESET_X).reshape(-1, *shape)
        y = net.get_buffer(CORESET_Y)
        if self.config.task is Task.CLASSIFICATION:
            y = y.long()
        return x, y, net.get_buffer(CORESET_HEAD).long()

    def _refit_on_coreset(self, options: dict[str, Any]) -> None:
        """Fine-tune the posterior on the coreset union with q̃_t as the prior (prediction)."""
        x, y, heads = self.coreset()
        mixed = head_count(self.module) > 1
        if mixed:
            y = heads * self._classes_per_head() + class_labels(y)
        refit = {k: v for k, v in options.items() if k not in ("patience",)}
        if self.config.coreset_epochs:
            refit["epochs"] = self.config.coreset_epochs
        self._mixed_heads = mixed
        self._kl_layers = self._layers_of(set(heads.tolist()))
        try:
            super().fit((x, y), None, **refit)
        finally:
            self._mixed_heads = False

    # ------------------------------------------------------------------ prediction
    def predict(self, x: Any, samples: Any = 50, *, head: int | None = None,
                **options: Any) -> Predictive:  # fmt: skip
        """:meth:`Method.predict` with output head ``head`` (multi-head networks; default: the
        last task's)."""
        with use_head(self.module, head):
            return super().predict(x, samples, **options)

    def sample(self, x: Tensor | Data, samples: int = 50, *, head: int | None = None,
               **options: Any) -> Tensor:  # fmt: skip
        """:meth:`Method.sample` with output head ``head`` (see :meth:`predict`)."""
        with use_head(self.module, head):
            return super().sample(x, samples, **options)

    # ------------------------------------------------------------------ bundles
    def extra_state(self) -> dict[str, Any]:
        return {"tasks": copy.deepcopy(self.tasks), "head": getattr(self.module, "head", None)}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        tasks = state.get("tasks", [])
        if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
            raise TypeError("extra.tasks must be a list of objects")
        self.tasks = tasks
        if state.get("head") is not None and hasattr(self.module, "head"):
            setattr(self.module, "head", int(state["head"]))  # noqa: B010 (as in fit)
