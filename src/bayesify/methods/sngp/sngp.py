"""SNGP (Liu et al. 2020, NeurIPS; JMLR 2023): a deterministic network made distance-aware.

Every hidden ``nn.Linear`` (and ``nn.Conv2d``) gets spectral normalisation with a bound c on its
norm (:class:`~bayesify.nn.spectral_norm.SpectralNormLayer`), and the network's last
``nn.Linear`` (its output layer) becomes a random-feature Gaussian process
(:class:`~bayesify.nn.random_feature_gp.RandomFeatureGP`): fixed random Fourier features of the
body's features, a trained output weight β, and a Laplace posterior over β.

Training: the data term plus β's Gaussian prior, ``‖β‖² / (2·n_data)`` a row (so the trained
β is the posterior mode). After training one pass over the training rows in eval mode accumulates
the precision ``s·I + Σ_i w_i φ_i φ_iᵀ`` (``w_i = 1``, the authors' code's default; with
``cov_weighting="logistic"`` the paper's ``p̂_i(1 - p̂_i)``, p̂ the row's largest class
probability), exactly (``cov_momentum=0``) or as a moving average over
mini-batches; the covariance is ``s`` times its inverse (:meth:`SNGP.fit_covariance`).

Prediction: the body runs once per row (it is deterministic); ``prediction="sampled"`` (the
default) draws T logits per row from ``N(φβᵀ, φΣφᵀ)``, so the predictive carries the GP variance
as its spread (mutual information; for regression the variance of the draws, plus τ⁻¹);
``"mean-field"`` (the paper's) gives T copies of ``φβᵀ / √(1 + λ·φΣφᵀ)``.

``from_pretrained(net, train, ...)``: the trained body is kept exactly (each normalised layer's
bound raised to its weight's norm where that is above c, so nothing is rescaled) and only β is
fitted on the body's features, then the covariance: a GP output layer on a trained body, without
the distance preservation only training with spectral normalisation gives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader

from bayesify.methods.core.base import Method, MethodConfig
from bayesify.nn import check_sample_bytes, sampling
from bayesify.nn.modes import eval_mode
from bayesify.nn.random_feature_gp import RandomFeatureGP
from bayesify.nn.spectral_norm import SpectralNormLayer, spectral_normalize
from bayesify.nn.stochastic import StochasticModule
from bayesify.options import GPCovWeighting, GPPrediction, Task, shown
from bayesify.train import Data, as_dataset


@dataclass(frozen=True)
class SNGPConfig(MethodConfig):
    """``spec_norm_bound``: c, the bound on every hidden layer's spectral norm;
    ``power_iterations``: power-iteration steps per training forward; ``spectral_conv``: also
    normalise ``nn.Conv2d`` layers; ``num_features``: M random Fourier features;
    ``lengthscale``: the RBF kernel's ℓ; ``ridge``: s, the ridge of the posterior precision
    (the covariance is ``s·(s·I + Σ w φφᵀ)⁻¹``); ``cov_momentum``: 0 for the exact sum over
    the training rows, in (0, 1) a moving average over mini-batches; ``cov_weighting``: each
    row's weight w in the precision (1, or p̂(1 - p̂) of its largest class probability);
    ``prediction``: sampled
    logits or the mean-field logits; ``mean_field_factor``: λ; ``seed``: the draw of the
    random features and the power iteration's start."""

    spec_norm_bound: float = 0.95
    power_iterations: int = 1
    spectral_conv: bool = True
    num_features: int = 1024
    lengthscale: float = 1.0
    ridge: float = 1.0
    cov_momentum: float = 0.0
    cov_weighting: GPCovWeighting = GPCovWeighting.GAUSSIAN
    prediction: GPPrediction = GPPrediction.SAMPLED
    mean_field_factor: float = math.pi / 8
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(("spec_norm_bound", "lengthscale", "ridge"), lambda v: v > 0, "> 0")
        self._require(("num_features",), lambda v: v >= 1, ">= 1")
        self._require(("power_iterations",), lambda v: v >= 0, ">= 0")
        self._require(("mean_field_factor",), lambda v: v >= 0, ">= 0")
        self._require(("cov_momentum",), lambda v: 0 <= v < 1, "in [0, 1)")
        if self.heteroscedastic:
            raise ValueError("SNGP's GP output layer is homoscedastic: likelihood='homoscedastic'")
        if self.prediction is GPPrediction.MEAN_FIELD and self.task is not Task.CLASSIFICATION:
            raise ValueError("prediction='mean-field' is a classification option")


class SNGP(Method):
    """Spectral-normalised hidden layers and a random-feature GP output layer with a Laplace
    posterior; samples are draws of the logits (or the mean-field logits)."""

    name = "sngp"
    Config = SNGPConfig
    config: SNGPConfig
    #: no spread warning: the GP variance is small on the training distribution by design
    #: and grows with the distance from it (a far-away share is what the tests check)
    spread_hint = None

    def _prepare(self, net: nn.Module) -> None:
        cfg = self.config
        if any(isinstance(m, StochasticModule) for m in net.modules()):
            raise ValueError("SNGP wraps a deterministic network; this one has stochastic layers")
        parent, name, last = _output_layer(net)
        generator = torch.Generator().manual_seed(cfg.seed)
        self.spectral: list[SpectralNormLayer] = spectral_normalize(
            net, cfg.spec_norm_bound, cfg.power_iterations, last, cfg.spectral_conv, cfg.seed
        )
        self.head = RandomFeatureGP(
            last.in_features,
            last.out_features,
            cfg.num_features,
            cfg.lengthscale,
            mean_field=cfg.prediction is GPPrediction.MEAN_FIELD,
            mean_field_factor=cfg.mean_field_factor,
            generator=generator,
            dtype=last.weight.dtype,
        ).to(last.weight.device)
        setattr(parent, name, self.head)
        self._head_only = False

    def objective(self, x: Tensor, y: Tensor, progress: float, n_data: int) -> Tensor:
        """The mean data term plus β's N(0, I) prior per row: ``‖β‖² / (2·n_data)``."""
        if self._head_only:  # from_pretrained: the body as trained, in eval mode
            self.net.eval()
            self.head.train()
        prior = self.head.beta.square().sum() / (2 * n_data)
        return self.nll(self.net(x), y) + prior

    def _after_fit(self, train: Data, batch_size: int, seed: int) -> None:
        self.fit_covariance(train, batch_size=batch_size)

    @torch.no_grad()
    def fit_covariance(self, train: Data, *, batch_size: int = 256) -> Tensor:
        """Set β's posterior covariance from one eval-mode pass over ``train``'s inputs
        (mini-batches of ``batch_size``, in order); returns the precision ``[M, M]``."""
        cfg, head, net = self.config, self.head, self.net
        m = head.num_features
        dev = self.device
        precision = cfg.ridge * torch.eye(m, dtype=torch.float64, device=dev)
        exact = cfg.cov_momentum == 0
        logistic = cfg.task is Task.CLASSIFICATION and cfg.cov_weighting is GPCovWeighting.LOGISTIC
        if exact:
            precision = torch.zeros_like(precision)
        captured: list[Tensor] = []
        hook = head.register_forward_pre_hook(lambda _, args: captured.append(args[0]))
        try:
            with eval_mode(net):  # every module's mode restored after
                loader = DataLoader(as_dataset(train), batch_size=batch_size, shuffle=False)
                for batch in loader:
                    captured.clear()
                    net(batch[0].to(device=dev, dtype=self._dtype()))
                    h = captured[0].reshape(-1, head.in_features)
                    phi = head.features(h).double()  # [B, M]
                    w = torch.ones(len(phi), dtype=phi.dtype, device=dev)
                    if logistic:
                        p = F.softmax((phi @ head.beta.t().double()), -1).amax(-1)
                        w = p * (1 - p)
                    step = (phi * w[:, None]).t() @ phi
                    if exact:
                        precision += step
                    else:
                        mom = cfg.cov_momentum
                        precision = mom * precision + (1 - mom) * step / len(phi)
        finally:
            hook.remove()
        if exact:
            precision += cfg.ridge * torch.eye(m, dtype=torch.float64, device=dev)
        head.set_precision(precision, cfg.ridge)
        return precision

    def _draw_samples(
        self,
        x: Tensor,
        samples: int,
        generator: torch.Generator | None,
        max_rows: int | None,
        start: int = 0,
        max_bytes: int | None = None,
    ) -> Tensor:
        """``[T, N, C]``. Where the GP layer is the last child of an ``nn.Sequential`` (the
        body before it deterministic) the body runs once per chunk of at most ``max_rows``
        rows and the layer gives all T groups' logits of the chunk's features at once, the
        moments computed once per row, not once per range of groups; otherwise the shared
        chunked pass (the same numbers)."""
        net, head = self.net, self.head
        last = isinstance(net, nn.Sequential) and net[-1] is head
        if start or not last or head._forward_hooks or head._forward_pre_hooks:
            return super()._draw_samples(x, samples, generator, max_rows, start, max_bytes)
        per_chunk = len(x) if max_rows is None else max(1, max_rows)
        out: Tensor | None = None
        with sampling(head, samples, generator, layers=(head,)):
            for i in range(0, len(x), per_chunk):
                h = x[i : i + per_chunk]
                for module in list(net.children())[:-1]:
                    h = module(h)
                y = head.group_outputs(h.reshape(h.shape[0], -1))  # [T, n, C]
                if out is None:
                    check_sample_bytes(samples, len(x), y.shape[-1], y.element_size(),
                                       head.group_bytes(), max_bytes)  # fmt: skip
                    out = y.new_empty((samples, len(x), y.shape[-1]))
                out[:, i : i + len(h)] = y
        assert out is not None
        return out

    def gp_variance(self, x: Tensor) -> Tensor:
        """The GP variance ``φΣφᵀ`` ``[N]`` of network inputs ``x [N, ...]`` (the same for every
        class): SNGP's epistemic score, larger far from the training features."""
        x = self._check_inputs(x)
        captured: list[Tensor] = []
        hook = self.head.register_forward_pre_hook(lambda _, args: captured.append(args[0]))
        try:
            with eval_mode(self.net), torch.no_grad():
                self.net(x)
        finally:
            hook.remove()
        return self.head.moments(captured[0].reshape(-1, self.head.in_features))[1]

    def _from_pretrained(
        self,
        train: Data | None,
        val: Data | None,
        *,
        batch_size: int | None,
        seed: int,
        progress: bool,
        epochs: int = 20,
        lr: float = 1e-2,
    ) -> None:
        """Keep the trained body exactly, fit β on ``train`` for ``epochs`` epochs at ``lr``
        (Adam, the body frozen in eval mode), then the covariance; τ on ``val``."""
        if train is None:
            raise ValueError("SNGP.from_pretrained fits the GP output layer on train: pass it")
        if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
            raise ValueError(f"epochs must be an int >= 1, got {shown(epochs)}")
        for layer in self.spectral:  # the trained weights unscaled: bound = max(c, σ̂)
            layer.power_iteration(50)
            layer.bound.copy_(torch.maximum(layer.bound, layer.sigma().detach() * (1 + 1e-6)))
        frozen = [p for p in self.net.parameters() if p is not self.head.beta and p.requires_grad]
        for p in frozen:
            p.requires_grad_(False)
        self._head_only = True
        try:
            self.fit(train, val, epochs=epochs, batch_size=batch_size or 32, lr=lr, seed=seed,
                     progress=progress)  # fmt: skip
        finally:
            self._head_only = False
            for p in frozen:
                p.requires_grad_(True)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_head_only", False)


def _output_layer(net: nn.Module) -> tuple[nn.Module, str, nn.Linear]:
    """The parent, attribute name and module of ``net``'s last ``nn.Linear`` (its output
    layer, which becomes the GP layer)."""
    found = [(parent, name, child)
             for parent in net.modules()
             for name, child in parent.named_children()
             if type(child) is nn.Linear]  # fmt: skip
    if not found:
        raise ValueError("SNGP needs an nn.Linear output layer; the network has none")
    parent, name, last = found[-1]
    assert isinstance(last, nn.Linear)
    return parent, name, last
