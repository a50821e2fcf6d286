"""DDU, Deep Deterministic Uncertainty (Mukhoti, Kirsch, van Amersfoort, Torr & Gal, CVPR 2023).

A deterministic classifier whose hidden layers have a soft bound ``c`` on their spectral norm
(every ``nn.Linear`` and convolution but the output layer: :mod:`bayesify.nn.spectral_bound`),
trained with plain cross-entropy; after training, a class-conditional Gaussian density (GDA:
:class:`~bayesify.methods.ddu.density.ClassDensity`) is fitted on the training rows' features,
the inputs of the last ``nn.Linear`` (the penultimate layer).

Two scores, one per kind of uncertainty:

* epistemic: the feature log density ``log q(z)`` (:meth:`DDU.density_score`, higher = more in
  distribution); the bounded layers keep distances between inputs roughly as they are in the
  features, so inputs far from the training data get a low density;
* aleatoric: the entropy of the network's softmax (``predict(x).entropy``).

The network is deterministic, so ``predict(x, samples=T)`` returns T identical softmax samples
``[T, N, C]`` computed in one pass over the N rows: the predictive's mutual information is 0,
and the density is the method's epistemic score, not a spread of samples.

``from_pretrained(net, train)`` fits the density to a network the caller trained, without
spectral bounds by default (they would rescale its trained layers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import torch
from torch import Tensor, nn

from bayesify.methods.core.base import Method, MethodConfig
from bayesify.methods.ddu.density import ClassDensity
from bayesify.nn import check_sample_bytes
from bayesify.nn.modes import eval_mode
from bayesify.nn.sampled_linear import last_linear
from bayesify.nn.spectral_bound import bound_spectral_norms
from bayesify.options import Task
from bayesify.train import Data

#: layers whose weight gets the spectral bound (all but the output layer)
BOUNDED = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
#: rows per forward when features are computed for the density
FEATURE_ROWS = 1024


@dataclass(frozen=True)
class DDUConfig(MethodConfig):
    """``spectral_norm``: bound the hidden layers' spectral norms (the paper's feature
    extractor); ``coefficient``: the bound c; ``power_iterations``: power-iteration steps per
    training forward; ``jitter``: the smallest jitter added to the class covariances' diagonal,
    relative to the mean feature variance (larger ones are tried until every class's
    covariance has a Cholesky factor; 0 as the authors)."""

    task: Task = Task.CLASSIFICATION
    spectral_norm: bool = True
    coefficient: float = 3.0
    power_iterations: int = 1
    jitter: float = 1e-3

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task is not Task.CLASSIFICATION:
            raise ValueError(
                "DDU is a classification method: its feature density is one Gaussian per class "
                "(task='classification')"
            )
        self._require(("coefficient",), lambda v: v > 0, "> 0")
        self._require(("power_iterations",), lambda v: v >= 1, ">= 1")
        self._require(("jitter",), lambda v: v >= 0, ">= 0")


class DDUNet(nn.Module):
    """The classifier (``body``) and its feature density (``density``); ``forward`` is the
    classifier's, ``features_and_logits`` also returns the inputs of its output layer."""

    def __init__(self, body: nn.Module, head: nn.Linear) -> None:
        super().__init__()
        self.body = body
        self.density = ClassDensity(head.out_features, head.in_features)
        self._head = [head]  # a plain list: not registered twice

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.body(x)
        return out

    def features_and_logits(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(features [N, D], logits [N, C])``: the output layer's inputs and outputs."""
        seen: list[Tensor] = []
        handle = self._head[0].register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
        try:
            logits: Tensor = self.body(x)
        finally:
            handle.remove()
        return seen[-1].reshape(len(x), -1), logits


class DDU(Method):
    """DDU: a spectrally bounded deterministic classifier with a Gaussian density of its
    features, the density being the epistemic score and the softmax entropy the aleatoric one."""

    name = "ddu"
    Config = DDUConfig
    config: DDUConfig
    net: DDUNet
    #: what ``bayesify calibrate`` thresholds unless told: the feature density, DDU's epistemic
    #: score (its samples are equal, so the mutual information is 0)
    deferral_score: ClassVar[str] = "density"

    def _prepare(self, net: nn.Module) -> None:
        cfg = self.config
        spec = getattr(net, "bayesify_spec", None)
        try:
            _, _, head = last_linear(net)
        except ValueError:
            raise ValueError(
                "DDU needs an nn.Linear output layer: its inputs are the features the density "
                "is fitted on"
            ) from None
        if cfg.spectral_norm:
            layers = [m for m in net.modules() if isinstance(m, BOUNDED) and m is not head]
            bound_spectral_norms(layers, cfg.coefficient, cfg.power_iterations)
        self.net = DDUNet(net, head)
        self.net.bayesify_spec = spec  # type: ignore[assignment]

    @property
    def density(self) -> ClassDensity:
        """The fitted class-conditional Gaussians of the features."""
        return self.net.density

    def _after_fit(self, train: Data, batch_size: int, seed: int) -> None:
        self.fit_density(train)

    def fit_density(self, train: Data) -> Self:
        """(Re)fit the feature density on ``train`` (``(X, y)``, a Dataset or a DataLoader):
        the features of every training row in eval mode; returns ``self``."""
        x, y = self._tensors(train)
        self.density.fit(self._features(x), y, self.config.jitter)
        return self

    def _features(self, x: Tensor) -> Tensor:
        """Features ``[N, D]`` of checked inputs, in eval mode, ``FEATURE_ROWS`` rows a pass."""
        with eval_mode(self.net), torch.no_grad():
            chunks = torch.split(x, FEATURE_ROWS)
            return torch.cat([self.net.features_and_logits(c)[0] for c in chunks])

    def features(self, x: Any) -> Tensor:
        """The penultimate features ``[N, D]`` of inputs ``x`` (raw units where the method
        has preprocessing, as :meth:`predict` takes them)."""
        prep = self.preprocessing
        if prep is not None:
            x = prep.inputs(x)
        return self._features(self._check_inputs(x))

    def density_score(self, x: Any) -> Tensor:
        """The feature log density ``log q(z)`` of every row of ``x``: ``[N]`` float64, higher
        = more in distribution (``x`` as :meth:`predict` takes it)."""
        return self.density.log_density(self.features(x))

    def input_log_density(self, x: Tensor) -> Tensor:
        """:meth:`density_score` of network inputs ``x`` (already preprocessed): ``[N]``."""
        return self.density.log_density(self._features(self._check_inputs(x)))

    def _draw_samples(
        self,
        x: Tensor,
        samples: int,
        generator: torch.Generator | None,
        max_rows: int | None,
        start: int = 0,
        max_bytes: int | None = None,
    ) -> Tensor:
        """One pass over the N rows (at most ``max_rows`` a forward), its outputs repeated T
        times: ``[T, N, C]`` (the network is deterministic)."""
        per_chunk = len(x) if max_rows is None else max(1, max_rows)
        out: Tensor | None = None
        for i in range(0, len(x), per_chunk):
            y: Tensor = self.net(x[i : i + per_chunk])
            if out is None:
                row = math.prod(y.shape[1:])
                check_sample_bytes(samples, len(x), row, y.element_size(), 0, max_bytes)
                out = y.new_empty((len(x), *y.shape[1:]))
            out[i : i + len(y)] = y
        assert out is not None
        return out.unsqueeze(0).expand(samples, *out.shape)

    @classmethod
    def from_pretrained(
        cls,
        net: Any,
        train: Data | None = None,
        *,
        val: Data | None = None,
        task: Task | str = Task.CLASSIFICATION,
        batch_size: int | None = None,
        seed: int = 0,
        progress: bool = False,
        inplace: bool = False,
        preset: str | None = None,
        **options: Any,
    ) -> Self:
        """Fit the feature density to a classifier the caller trained (``train``: its training
        data). Without spectral bounds unless ``spectral_norm=True`` is given with fine-tuning
        (``epochs`` > 0): a bound would rescale the trained layers whose norm is above c."""
        options.setdefault("spectral_norm", False)
        return super().from_pretrained(net, train, val=val, task=task, batch_size=batch_size,
                                       seed=seed, progress=progress, inplace=inplace,
                                       preset=preset, **options)  # fmt: skip

    def _from_pretrained(
        self,
        train: Data | None,
        val: Data | None,
        *,
        batch_size: int | None,
        seed: int,
        progress: bool,
        epochs: int = 0,
        lr: float = 1e-3,
    ) -> None:
        """Fine-tune for ``epochs`` at ``lr`` when ``epochs`` > 0, then fit the density on
        ``train``."""
        if train is None:
            raise ValueError(
                "DDU.from_pretrained needs training data (train): its feature density is "
                "fitted on the training rows' features"
            )
        if self.config.spectral_norm and not epochs:
            raise ValueError(
                "spectral_norm=True rescales a trained network's layers whose norm is above "
                "the coefficient: fine-tune it (epochs > 0) or leave spectral_norm off"
            )
        super()._from_pretrained(train, val, batch_size=batch_size, seed=seed,
                                 progress=progress, epochs=epochs, lr=lr)  # fmt: skip
        if not epochs:
            self.fit_density(train)
