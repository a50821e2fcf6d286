"""Hyper-parameter search of the UCI benchmark (Teye et al. 2018, §4.3).

Teye et al. choose weight decay and batch size (MCBN) or dropout rate (MC dropout) by 5-fold
cross-validation on the training part, minimising the RMSE of the MC predictive mean. The folds of
one grid point train side by side; every ``check_every`` epochs each fold's RMSE is measured and
their mean compared with the best so far; after ``patience`` checks without improvement (or at
``max_epochs``) the best check's epoch count is the grid point's training length. Their code
(github.com/icml-mcbn/mcbn, notebook 02) puts the L2 penalty on the weight matrices only (not on
biases nor batch-norm scale and shift), with the loss ½·MSE + λ·½‖W‖².

Here one hold-out (``folds`` = one :class:`Fold`) is the quick variant of the same search. The
folds train through :func:`bayesify.train.train_loop` with one optimiser each, kept across checks.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from bayesify.methods import Method
from bayesify.methods.core.likelihood import regression_means
from bayesify.predictive import Predictive
from bayesify.seeding import seeded
from bayesify.train import as_loader, make_optimizer, train_loop

log = logging.getLogger(__name__)

#: layers whose ``weight`` gets the L2 penalty under Teye's rule
_WEIGHT_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


@dataclass(frozen=True)
class Fold:
    """One training / validation pair (model units): inputs ``[N, D]``, targets ``[N]``."""

    x_train: Tensor
    y_train: Tensor
    x_val: Tensor
    y_val: Tensor


def make_folds(x: Tensor, y: Tensor, k: int, *, seed: int = 0) -> list[Fold]:
    """``k`` folds of a seeded permutation of the rows (fold i validates on the i-th part)."""
    if k < 2 or k > len(x):
        raise ValueError(f"cross-validation needs 2 <= folds <= {len(x)} rows, got {k}")
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    parts = order.tensor_split(k)
    folds = []
    for i, val in enumerate(parts):
        train = torch.cat([p for j, p in enumerate(parts) if j != i])
        folds.append(Fold(x[train], y[train], x[val], y[val]))
    return folds


def decay_groups(net: nn.Module, weight_decay: float, *, decay_all: bool) -> list[dict]:
    """Adam parameter groups: the L2 penalty on Linear/Conv weights only (Teye's code), or on
    every parameter (``decay_all``, PyTorch's usual ``weight_decay``)."""
    params = [p for p in net.parameters() if p.requires_grad]
    if decay_all:
        return [{"params": params, "weight_decay": weight_decay}]
    weights = {id(m.weight) for m in net.modules() if isinstance(m, _WEIGHT_LAYERS)}
    return [
        {"params": [p for p in params if id(p) in weights], "weight_decay": weight_decay},
        {"params": [p for p in params if id(p) not in weights], "weight_decay": 0.0},
    ]


def teye_weight_decay(lam: float) -> float:
    """Adam's ``weight_decay`` equal to Teye's L2 factor λ: their loss ½·MSE + λ·½‖W‖² has the
    gradients of MSE + 2λ·½‖W‖² up to a factor 2, which Adam ignores; our loss is the MSE."""
    return 2.0 * lam


@dataclass(frozen=True)
class TrainSpec:
    """How a grid point trains: batch size, Adam learning rate, L2 factor, decay rule."""

    batch_size: int
    lr: float = 1e-3
    weight_decay: float = 0.0  # Adam's weight_decay (see teye_weight_decay)
    decay_all: bool = False


@dataclass
class CVResult:
    """A grid point's cross-validation outcome: the best mean RMSE over folds, the epochs at
    that check, each fold's network state there, and the mean RMSE at every check."""

    rmse: float
    epochs: int
    states: list[dict] = field(repr=False)
    checks: list[float] = field(default_factory=list)


class _Runner:
    """One method trained on one data set in chunks of epochs with a persistent optimiser."""

    def __init__(self, method: Method, x: Tensor, y: Tensor, spec: TrainSpec, seed: int):
        self.method, self.x, self.y, self.spec, self.seed = method, x, y, spec, seed
        self.loader = as_loader((x, y), spec.batch_size, shuffle=True, seed=seed)
        groups = decay_groups(method.net, spec.weight_decay, decay_all=spec.decay_all)
        self.opt = make_optimizer(groups, "adam", spec.lr)
        self.n_data = len(x)
        method._remember_input_shape(self.loader.dataset)

    def train(self, epochs: int) -> None:
        m = self.method
        train_loop(
            m.net,
            lambda xb, yb, p: m.objective(xb, yb, p, self.n_data),
            self.loader,
            self.opt,
            epochs=epochs,
            after_step=m.after_step,
            progress=False,
        )

    def finish(self) -> None:
        """What ``fit`` does after training (e.g. fill MCBN's statistics bank)."""
        self.method._after_fit((self.x, self.y), self.spec.batch_size, self.seed)


def weights_state(net: nn.Module) -> dict[str, Tensor]:
    """A copy of ``net``'s state without MCBN's statistics bank (refilled after loading)."""
    return {k: v.clone() for k, v in net.state_dict().items() if ".bank_" not in f".{k}"}


def load_weights(net: nn.Module, state: dict[str, Tensor]) -> None:
    """Load :func:`weights_state`; only bank buffers may be missing."""
    missing, unexpected = net.load_state_dict(state, strict=False)
    if unexpected or any(".bank_" not in f".{k}" for k in missing):
        raise RuntimeError(f"state does not fit the network: {missing=}, {unexpected=}")


def mc_samples(method: Method, x: Tensor, samples: int, seed: int) -> Tensor:
    """Sample means ``[T, N]`` of a regression method (T = 0: the deterministic net, ``[1, N]``)."""
    if samples == 0:
        method.net.eval()
        with torch.no_grad():
            return method.net(x).reshape(1, -1)
    return regression_means(method.sample(x, samples, seed=seed))


def cross_validate(
    build: Callable[[], Method],
    folds: Sequence[Fold],
    spec: TrainSpec,
    *,
    max_epochs: int,
    check_every: int,
    patience: int,
    samples: int,
    seed: int = 0,
    report: Callable[[int, float], None] | None = None,
) -> CVResult:
    """Train one model per fold side by side; early stopping on the mean validation RMSE of the
    MC mean (``samples`` T; 0 uses the deterministic net), checked every ``check_every`` epochs.

    ``build()`` makes a fresh method (it is called once per fold, under ``seed``);
    ``report(epoch, rmse)`` is told each check's mean RMSE (a search's pruner may stop here).
    """
    if check_every < 1 or max_epochs < 1 or patience < 1:
        raise ValueError("check_every, max_epochs and patience must be >= 1")
    with seeded(seed):
        runners = [
            _Runner(build(), f.x_train, f.y_train, spec, seed + i) for i, f in enumerate(folds)
        ]
        best, best_epochs, states, stale, checks = math.inf, 0, [], 0, []
        epoch = 0
        while epoch < max_epochs and stale < patience:
            step = min(check_every, max_epochs - epoch)
            rmses = []
            for r, f in zip(runners, folds, strict=True):
                r.train(step)
                if samples:
                    r.finish()
                mean = mc_samples(r.method, f.x_val, samples, seed).mean(0)
                rmses.append(float(((mean - f.y_val) ** 2).mean().sqrt()))
            epoch += step
            score = sum(rmses) / len(rmses)
            checks.append(score)
            if report is not None:
                report(epoch, score)
            if score <= best:  # the authors' rule: ties count as improvements
                best, best_epochs, stale = score, epoch, 0
                states = [weights_state(r.method.net) for r in runners]
            else:
                stale += 1
    log.info("CV %s: RMSE %.4f at %d epochs (%d checks)", spec, best, best_epochs, len(checks))
    return CVResult(best, best_epochs, states, checks)


def fold_predictive(
    build: Callable[[], Method],
    folds: Sequence[Fold],
    result: CVResult,
    spec: TrainSpec,
    *,
    samples: int,
    seed: int = 0,
) -> tuple[Predictive, Tensor]:
    """Every fold's best model on its own validation rows, joined: samples ``[T, ΣN_val]`` and
    targets; τ and the constant baseline are fitted on this (Teye et al.: average CV CRPS)."""
    parts, ys = [], []
    with seeded(seed):
        for i, (f, state) in enumerate(zip(folds, result.states, strict=True)):
            method = build()
            load_weights(method.net, state)
            _Runner(method, f.x_train, f.y_train, spec, seed + i).finish()
            parts.append(mc_samples(method, f.x_val, samples, seed))
            ys.append(f.y_val)
    return Predictive.regression(torch.cat(parts, dim=1).double()), torch.cat(ys).double()


def train_final(
    build: Callable[[], Method], x: Tensor, y: Tensor, spec: TrainSpec, epochs: int, seed: int
) -> Method:
    """A fresh model trained on all of ``x``, ``y`` for ``epochs`` (the CV choice), then
    finished as ``fit`` would (MCBN: bank filled)."""
    with seeded(seed):
        runner = _Runner(build(), x, y, spec, seed)
        runner.train(max(epochs, 1))
        runner.finish()
    return runner.method
