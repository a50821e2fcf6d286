"""Training a method: ``fit`` through the one training loop (in this process or on data-parallel
replicas, by ``strategy``), and fitting the regression noise τ⁻¹ on validation data afterwards.

:class:`Trainable` is a mixin of :class:`~bayesify.methods.core.base.Method`; it relies on the
method's hooks (``objective``, ``nll``, ``param_groups``, ``after_step``, ``_after_fit``,
``_check_strategy``), its config and its sampling.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Self

import torch
from torch import Tensor

from bayesify.methods.core.inputs import regression_targets
from bayesify.methods.core.likelihood import regression_means, split_heteroscedastic
from bayesify.methods.core.presets import with_recipe
from bayesify.methods.core.spread import check_spread
from bayesify.metrics import fit_constant_std
from bayesify.options import Task
from bayesify.posthoc.noise import fit_noise_variance
from bayesify.predictive import Predictive
from bayesify.train import (
    Data,
    LoopOptions,
    Replica,
    Strategy,
    Trained,
    as_dataset,
    make_optimizer,
    train_loop,
)

if TYPE_CHECKING:
    from bayesify.methods.core.config import MethodConfig
    from bayesify.train.loop import History


class Trainable:
    """``fit``, ``fit_noise`` and the constant baseline (mixed into :class:`Method`)."""

    config: MethodConfig
    name: ClassVar[str]
    net: Any
    constant_variance: float | None
    history: History | None

    @with_recipe
    def fit(
        self,
        train: Data,
        val: Data | None = None,
        *,
        epochs: int = 100,
        batch_size: int = 32,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        optimizer: str = "adam",
        patience: int | None = None,
        seed: int = 0,
        device: str | torch.device | None = None,
        progress: bool = True,
        strategy: Strategy | None = None,
    ) -> Self:
        """Train on ``train`` (``(X, y)`` tensors, a Dataset or a DataLoader); returns ``self``.

        A DataLoader is used as it is: its batch size, not ``batch_size``, is the training batch
        size (which e.g. MCBN's bank then matches). With ``val``, the epoch with the best
        validation loss is kept (early stopping after ``patience`` stale epochs) and, for
        regression, τ is fitted on it afterwards. ``strategy`` runs the training loop elsewhere,
        e.g. ``bayesify.train.distributed.DDP(nproc=2)`` (``batch_size`` is then the global
        batch); the default trains in this process.
        """
        strategy = strategy or Strategy()
        if device is not None:
            self.to(device)
        train = self._checked_data(train, "training inputs")
        if val is not None:
            val = self._checked_data(val, "validation inputs")
        replica_batch = strategy.replica_batch_size(train, batch_size)
        self._check_strategy(strategy, replica_batch)
        self._remember_input_shape(as_dataset(train))
        loop = LoopOptions(epochs, batch_size, lr, weight_decay, optimizer, patience, seed,
                            progress)  # fmt: skip
        dev = self.device
        self._trained_with = (lr, str(optimizer))  # what SWAG collects with by default
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
            self.history = strategy.run(partial(self._train_replica, train, val, loop), self.net)
            self.net.eval()
            self._after_fit(train, replica_batch, seed)
        if val is not None and self.config.task is Task.REGRESSION:
            self.fit_noise(val, seed=seed)
        if val is not None:
            self.check_spread_on(val, seed=seed)
        return self

    def check_spread_on(self, val: Data, *, seed: int = 0) -> float:
        """The epistemic share of the predictive on ``val``'s inputs (kept as
        ``epistemic_share``); warns where it is negligible (:mod:`.spread`)."""
        if getattr(self, "spread_hint", None) is None:
            return float("nan")
        x, _ = self._tensors(val)
        pred = self.to_predictive(self.sample(x, self.config.noise_samples, seed=seed))
        self.epistemic_share = check_spread(pred, type(self).__name__, self.spread_hint)
        return self.epistemic_share

    def _train_replica(
        self, train: Data, val: Data | None, loop: LoopOptions, replica: Replica
    ) -> Trained:
        """One replica's training through the one loop (:func:`bayesify.train.train_loop`)."""
        net = self.net.to(replica.device(self.device))
        dev = self.device
        replica.check_same(train, val, loop)
        loader, on_epoch = replica.loader(train, loop.batch_size, loop.seed)
        n_data = len(loader.dataset)
        opt = make_optimizer(self.param_groups(loop.lr, loop.weight_decay), loop.optimizer, loop.lr)
        validate = None
        if val is not None:
            xv, yv = self._tensors(val)
            validate = lambda: replica.agree(float(self.nll(net(xv), yv)))  # noqa: E731
        model = replica.wrap(net)
        torch.manual_seed(loop.seed + replica.rank)
        # the objectives forward through self.net: during training that is the wrapped module
        self.net = model
        try:
            history = train_loop(
                model,
                lambda x, y, p: self.objective(x, y, p, n_data),
                loader,
                opt,
                epochs=loop.epochs,
                validate=validate,
                patience=loop.patience,
                after_step=self.after_step,
                device=dev,
                progress=loop.progress and replica.rank == 0,
                desc=f"{self.name} train" + (f" ×{replica.world}" if replica.world > 1 else ""),
                on_epoch=on_epoch,
            )
        finally:
            self.net = replica.unwrap(model)
        return Trained(history, self.net)

    def fit_noise(self, val: Data, *, seed: int = 0) -> float:
        """Fit τ⁻¹ on validation data for ``config.noise_objective``; returns it (regression)."""
        if self.config.task is not Task.REGRESSION:
            raise ValueError("the noise variance τ⁻¹ is a regression parameter")
        xv, yv = self._tensors(val)
        yv = regression_targets(yv)
        out = self.sample(xv, self.config.noise_samples, seed=seed)
        if self.config.heteroscedastic:  # the noise is learned: only the baseline is fitted
            means = split_heteroscedastic(out)[0]
        else:
            means = self._fit_noise_variance(regression_means(out), xv, yv, seed)
        std = fit_constant_std(means.mean(0), yv, self.config.noise_objective.value)
        self.constant_variance = float(std) ** 2
        return self.noise_variance

    def _fit_noise_variance(self, means: Tensor, xv: Tensor, yv: Tensor, seed: int) -> Tensor:
        """Set homoscedastic τ⁻¹ from the validation draws' means ``[T, N]``; returns the means
        the constant baseline is fitted to (a method whose draws depend on τ⁻¹ draws again)."""
        self.noise_variance = fit_noise_variance(means, yv, self.config.noise_objective)
        return means

    def constant_baseline(self, pred: Predictive) -> Predictive:
        """The constant-uncertainty baseline (CUBN / CUDO) for a regression predictive: same mean,
        the constant variance fitted on validation data by :meth:`fit_noise`."""
        if self.constant_variance is None:
            raise RuntimeError("fit with validation data (or call fit_noise) before the baseline")
        return pred.constant_uncertainty(self.constant_variance)
