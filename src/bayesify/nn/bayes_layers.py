"""Mean-field Gaussian layers for Bayes by Backprop (Blundell et al. 2015).

Each weight has a posterior ``N(μ, σ²)`` with ``σ = softplus(ρ)``. Priors: a Gaussian
``N(0, σ_p²)`` (closed-form KL) or Blundell's scale mixture
``π N(0, σ₁²) + (1 − π) N(0, σ₂²)`` (one-sample Monte Carlo KL); they, the KL and the fused
training nodes live in :mod:`bayesify.nn.gaussian_posterior`.

Noise per row:

* :class:`BayesLinear` uses the local reparameterisation trick (Kingma et al. 2015): the
  pre-activation of a row is ``N(x μᵀ + b_μ, x² σ²ᵀ + σ_b²)``, sampled directly, in training
  and prediction (two matrix products and one standard normal per output unit and row).
* :class:`BayesConv2d` predicts with one weight sample per sample group:
  ``w_t = μ + σ ∘ ε_t``, ``b_t = b_μ + σ_b ∘ ε_t'`` drawn once per group (and per range of
  groups) from the group's key, every row of group t convolved with ``w_t`` in one grouped
  convolution. Sample t of a row is an exact posterior draw, the T samples of a row are
  independent, and the rows of one group share their network draw (a function sample, as in the
  loop of T passes with sampled weights). One convolution per layer, the price of a plain one;
  no per-row noise. In training it draws one weight sample per mini-batch by default
  (``train_estimator="shared"``, Blundell et al.'s plain reparameterisation: one convolution);
  ``"flipout"`` (Wen et al. 2018) trains with per-row signs around one ε per mini-batch,
  ``conv(x, μ) + conv(x ∘ s_in, σ ∘ ε) ∘ s_out``, and lower-variance gradients at the price of
  a second convolution.

Outside sampling the layers are random in ``.train()`` (torch's global RNG, for the ELBO) and
return the posterior-mean output in ``.eval()``. Inside :func:`bayesify.nn.sampling` the per-row
noise of :class:`BayesLinear` comes from :class:`~bayesify.nn.row_noise.RowNoise`
(chunk-invariant, replayable per group), the convolutions' per-group weights from
:meth:`~bayesify.nn.row_noise.RowNoise.group_normal` (the group's key: the same in every chunk
and range of groups), made once per range of groups and kept by
:meth:`~bayesify.nn.row_noise.RowNoiseModule.range_cached`; σ = softplus(ρ) is computed once
per sampling block, not per chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.nn.gaussian_posterior import (
    Prior,
    PriorKind,
    _LocalReparamLinear,
    _SoftplusGaussian,
)
from bayesify.nn.row_noise import RowNoiseModule
from bayesify.options import ConvEstimator, parse_option

_V = TypeVar("_V")

#: the :class:`~bayesify.nn.row_noise.RowNoise` group-normal stream of the convolutions'
#: per-group weight noise: 0, the seed is the group's key (it was 4, which torch's generator,
#: keeping a seed's low 32 bits only, read as 0: the same numbers)
_EPS_STREAM = 0


class _BayesLayer(RowNoiseModule):
    """Shared parameters, KL and sampling state of BayesLinear / BayesConv2d."""

    def _init_params(
        self, weight: Tensor, bias: Tensor | None, prior: Prior, init_rho: float
    ) -> None:
        self.prior = prior
        self._step_kl: Tensor | None = None
        self.weight_mu = nn.Parameter(weight.detach().clone())
        self.weight_rho = nn.Parameter(torch.full_like(self.weight_mu, init_rho))
        if bias is not None:
            self.bias_mu = nn.Parameter(bias.detach().clone())
            self.bias_rho = nn.Parameter(torch.full_like(self.bias_mu, init_rho))
        else:
            self.register_parameter("bias_mu", None)
            self.register_parameter("bias_rho", None)

    @property
    def weight_sigma(self) -> Tensor:
        return F.softplus(self.weight_rho)

    @property
    def bias_sigma(self) -> Tensor | None:
        return None if self.bias_rho is None else F.softplus(self.bias_rho)

    def _pairs(self) -> list[tuple[Tensor, Tensor]]:
        pairs = [(self.weight_mu, self.weight_sigma)]
        if self.bias_mu is not None:
            pairs.append((self.bias_mu, self.bias_sigma))
        return pairs

    def kl(self) -> Tensor:
        """``KL(q || p)`` of this layer's weights and biases: closed form for the Gaussian
        prior, a one-sample Monte Carlo estimate ``log q(w) − log p(w)`` for the mixture."""
        return self._sigmas_and_kl()[1]

    def _sigmas_and_kl(self) -> tuple[list[Tensor], Tensor]:
        """σ of the weights (and bias) and the layer's KL, from one softplus per tensor."""
        if self.prior.kind is PriorKind.GAUSSIAN:
            pairs = [(self.weight_mu, self.weight_rho)]
            if self.bias_mu is not None:
                pairs.append((self.bias_mu, self.bias_rho))
            out = [_SoftplusGaussian.apply(m, r, self.prior.sigma) for m, r in pairs]
            sigmas = [o[0] for o in out]
            kl = out[0][1] if len(out) == 1 else out[0][1] + out[1][1]
            return sigmas, kl
        kl = self.weight_mu.new_zeros(())
        sigmas = []
        for m, s in self._pairs():
            w = m + s * torch.randn_like(m)
            kl = kl + torch.distributions.Normal(m, s).log_prob(w).sum() - self.prior.log_prob(w)
            sigmas.append(s)
        return sigmas, kl

    def _training_sigmas(self) -> list[Tensor]:
        """σ for a training forward; the step's KL is computed alongside and kept for
        :meth:`take_kl` (one softplus per step serves both)."""
        sigmas, kl = self._sigmas_and_kl()
        self._step_kl = kl if torch.is_grad_enabled() else None
        return sigmas

    def take_kl(self) -> Tensor:
        """The KL recorded by the last training forward (then forgotten), else :meth:`kl`."""
        kl, self._step_kl = self._step_kl, None
        return self.kl() if kl is None else kl

    def _noisy(self) -> bool:
        return self.stochastic and self.noise.keys is not None

    def _block_sigmas(self) -> list[Tensor]:
        """σ of the weights (and bias) while sampling, computed once per sampling block (every
        chunk and range of groups reuses it) and, without gradients, kept across blocks."""
        make = lambda: [s for _, s in self._pairs()]  # noqa: E731
        return self.range_cached("sigmas", lambda: self._kept("sigmas", make), per_range=False)

    def _kept(self, name: str, make: Callable[[], _V]) -> _V:
        """``make()`` of the ρ parameters, made again only when they changed (another
        tensor, data, dtype or device, or modified in place: an optimiser step, a loaded
        state) and only kept while gradients are off (a sampling pass of ``predict``)."""
        if torch.is_grad_enabled():
            return make()
        key = [(p, p._version, p.data_ptr(), p.dtype, p.device)
               for p in (self.weight_rho, self.bias_rho) if p is not None]  # fmt: skip
        kept = self.__dict__.setdefault("_kept_values", {})
        hit = kept.get(name)
        if (
            hit is not None
            and len(hit[0]) == len(key)
            and all(a[0] is b[0] and a[1:] == b[1:] for a, b in zip(hit[0], key, strict=True))
        ):
            return hit[1]
        value = make()
        kept[name] = (key, value)
        return value


class BayesLinear(_BayesLayer):
    """Mean-field Gaussian ``nn.Linear``: ``[N, *, in]`` -> ``[N, *, out]`` (local reparam.)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        prior: Prior | None = None,
        init_rho: float = -5.0,
    ) -> None:
        super().__init__()
        ref = nn.Linear(in_features, out_features, bias=bias)  # torch's initialisation
        self.in_features, self.out_features = in_features, out_features
        self._init_params(ref.weight, ref.bias, prior or Prior(), init_rho)

    @classmethod
    def from_linear(
        cls, layer: nn.Linear, prior: Prior | None = None, init_rho: float = -5.0
    ) -> BayesLinear:
        """Posterior means initialised from ``layer``'s (pretrained) weights."""
        new = cls(layer.in_features, layer.out_features, layer.bias is not None, prior, init_rho)
        new._init_params(layer.weight, layer.bias, new.prior, init_rho)
        return new.to(layer.weight.device).train(layer.training)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, prior={self.prior.kind.value}"

    def forward(self, x: Tensor) -> Tensor:
        noisy = self._noisy()
        if self.training and not noisy and self.prior.kind is PriorKind.GAUSSIAN:
            return self._fused_training_forward(x)
        mean = F.linear(x, self.weight_mu, self.bias_mu)  # [R, *, out]
        if not (noisy or self.training):
            return mean
        if noisy:
            w_var, b_var = self.range_cached("variances", self._variances, per_range=False)
            var = F.linear(x.square(), w_var, b_var)  # [R, *, out]
            rows = x.shape[0]
            z = self.noise.normal(rows, mean[0].numel(), x.device).to(mean.dtype)
            self.noise.advance(rows)
            return torch.addcmul(mean, var.add_(1e-16).sqrt_(), z.view_as(mean))
        sigmas = self._training_sigmas()
        b_var = sigmas[1].square() if len(sigmas) > 1 else None
        var = F.linear(x.square(), sigmas[0].square(), b_var)  # [R, *, out]
        return mean + torch.sqrt(var + 1e-16) * torch.randn_like(mean)

    def _variances(self) -> tuple[Tensor, Tensor | None]:
        """σ² of the weights ``[out, in]`` and bias ``[out]`` (None without bias)."""

        def make() -> tuple[Tensor, Tensor | None]:
            sigmas = self._block_sigmas()
            return sigmas[0].square(), sigmas[1].square() if len(sigmas) > 1 else None

        return self._kept("variances", make)

    def _fused_training_forward(self, x: Tensor) -> Tensor:
        """Training output (local reparameterisation) and this step's KL from one autograd
        node (:class:`_LocalReparamLinear`); the KL is kept for :meth:`take_kl`."""
        flat = x.reshape(-1, self.in_features)
        eps = torch.randn(len(flat), self.out_features, device=x.device, dtype=x.dtype)
        out, kl = _LocalReparamLinear.apply(
            flat, self.weight_mu, self.weight_rho, self.bias_mu, self.bias_rho, eps,
            self.prior.sigma,
        )  # fmt: skip
        self._step_kl = kl if torch.is_grad_enabled() else None
        return out.view(*x.shape[:-1], self.out_features)


class BayesConv2d(_BayesLayer):
    """Mean-field Gaussian ``nn.Conv2d`` (zero padding): ``[N, C, H, W]`` -> ``[N, C', H', W']``
    with one weight and bias sample per sample group while sampling."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] | str = 0,
        dilation: int | tuple[int, int] = 1,
        conv_groups: int = 1,
        bias: bool = True,
        prior: Prior | None = None,
        init_rho: float = -5.0,
        train_estimator: ConvEstimator | str = ConvEstimator.SHARED,
    ) -> None:
        super().__init__()
        ref = nn.Conv2d(
            in_channels, out_channels, kernel_size, stride, padding, dilation, conv_groups, bias
        )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.stride, self.padding, self.dilation = ref.stride, ref.padding, ref.dilation
        self.conv_groups = conv_groups
        self.train_estimator = parse_option(ConvEstimator, train_estimator, option="conv_estimator")
        self._init_params(ref.weight, ref.bias, prior or Prior(), init_rho)

    @classmethod
    def from_conv2d(
        cls,
        layer: nn.Conv2d,
        prior: Prior | None = None,
        init_rho: float = -5.0,
        train_estimator: ConvEstimator | str = ConvEstimator.SHARED,
    ) -> BayesConv2d:
        """Posterior means initialised from ``layer``'s (pretrained) weights."""
        if layer.padding_mode != "zeros":
            raise ValueError(f"BayesConv2d supports zero padding only, got {layer.padding_mode!r}")
        new = cls(
            layer.in_channels,
            layer.out_channels,
            layer.kernel_size,
            layer.stride,
            layer.padding,
            layer.dilation,
            layer.groups,
            layer.bias is not None,
            prior,
            init_rho,
            train_estimator,
        )
        new._init_params(layer.weight, layer.bias, new.prior, init_rho)
        return new.to(layer.weight.device).train(layer.training)

    def extra_repr(self) -> str:
        k = tuple(self.weight_mu.shape[2:])
        return f"{self.in_channels}, {self.out_channels}, kernel_size={k}"

    def _conv(self, x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
        return F.conv2d(x, w, b, self.stride, self.padding, self.dilation, self.conv_groups)

    def _group_weights(self, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
        """Weight samples ``[G, C', C/conv_groups, kh, kw]`` and bias samples ``[G, C']`` (None
        without bias) of the groups in use, ``μ + σ ∘ ε_t`` with ε from each group's key; made
        once per sampling block or range of groups (every row chunk reuses them)."""

        def draw() -> tuple[Tensor, Tensor | None]:
            mu, b_mu = self.weight_mu, self.bias_mu
            sigmas = self._block_sigmas()
            n_w = mu.numel()
            n_b = 0 if b_mu is None else b_mu.numel()
            eps = self.noise.group_normal(n_w + n_b, mu.device, _EPS_STREAM).to(dtype)
            groups = len(eps)
            w = torch.addcmul(mu, sigmas[0], eps[:, :n_w].view(groups, *mu.shape))
            if b_mu is None:
                return w, None
            return w, torch.addcmul(b_mu, sigmas[1], eps[:, n_w:])

        return self.range_cached("weights", draw)

    def _group_conv(self, x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        """Group t of ``x [G*n, C, H, W]`` convolved with its own weight ``w[t]``
        (``w [G, C', C/conv_groups, kh, kw]``) and bias ``b[t]`` (``b [G, C']``) as one grouped
        convolution: ``[G*n, C', H', W']``."""
        g = w.shape[0]
        if x.shape[0] % g:
            raise ValueError(f"{x.shape[0]} rows do not split into {g} sample groups")
        if g == 1:
            return self._conv(x, w[0], None if b is None else b[0])
        n, rest = x.shape[0] // g, x.shape[1:]
        xg = x.view(g, n, *rest).transpose(0, 1).reshape(n, g * rest[0], *rest[1:])
        out = F.conv2d(xg, w.reshape(-1, *w.shape[2:]), None if b is None else b.reshape(-1),
                       self.stride, self.padding, self.dilation, self.conv_groups * g)  # fmt: skip
        out = out.view(n, g, -1, *out.shape[2:]).transpose(0, 1)  # [G, n, C', H', W']
        return out.reshape(g * n, *out.shape[2:])

    def _shared_sample_forward(self, x: Tensor) -> Tensor:
        """Training with one weight sample for the whole mini-batch (Blundell et al.'s plain
        reparameterisation): one convolution instead of flipout's two, gradients noisier."""
        sigmas = self._training_sigmas()
        w = self.weight_mu + sigmas[0] * torch.randn_like(self.weight_mu)
        b = None if self.bias_mu is None else self.bias_mu + sigmas[1] * torch.randn_like(sigmas[1])
        return self._conv(x, w, b)

    def _flipout_forward(self, x: Tensor) -> Tensor:
        """Training with flipout (Wen et al. 2018): per-row signs around one ε per mini-batch,
        ``conv(x, μ) + conv(x ∘ s_in, σ ∘ ε) ∘ s_out`` plus a per-row bias sample."""
        mean = self._conv(x, self.weight_mu, self.bias_mu)  # [R, C', H', W']
        rows, c_in, c_out = x.shape[0], x.shape[1], mean.shape[1]
        s_in = torch.randint(0, 2, (rows, c_in), device=x.device) * 2.0 - 1.0
        s_out = torch.randint(0, 2, (rows, c_out), device=x.device) * 2.0 - 1.0
        z_b = torch.randn(rows, c_out, device=x.device) if self.bias_mu is not None else None
        eps = torch.randn_like(self.weight_mu)
        sigmas = self._training_sigmas()
        s_in, s_out = s_in.to(x.dtype)[..., None, None], s_out.to(x.dtype)[..., None, None]
        out = mean + self._conv(x * s_in, sigmas[0] * eps) * s_out
        if z_b is not None:
            out = out + (sigmas[1] * z_b.to(x.dtype))[..., None, None]
        return out

    def forward(self, x: Tensor) -> Tensor:
        if self._noisy():  # inside a sampling block: one weight sample per group
            w, b = self._group_weights(x.dtype)
            out = self._group_conv(x, w, b)
            self.noise.advance(x.shape[0])
            return out
        if not self.training:
            return self._conv(x, self.weight_mu, self.bias_mu)
        if self.train_estimator == ConvEstimator.SHARED:
            return self._shared_sample_forward(x)
        return self._flipout_forward(x)


def bayesianize(
    model: nn.Module,
    *,
    last_k: int | None = None,
    prior: Prior | None = None,
    init_rho: float = -5.0,
    conv_estimator: ConvEstimator | str = ConvEstimator.SHARED,
) -> list[_BayesLayer]:
    """Replace ``nn.Linear``/``nn.Conv2d`` layers of ``model`` (in place) by Bayesian ones whose
    posterior means are the current (e.g. pretrained) weights.

    ``last_k`` converts only the last k such layers in module order (a hybrid network); the
    rest stay deterministic. ``conv_estimator``: the convolutions' training noise, ``"shared"``
    or ``"flipout"`` (see :class:`BayesConv2d`). Returns all Bayesian layers in order.
    """
    conv_estimator = parse_option(ConvEstimator, conv_estimator, option="conv_estimator")
    found = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) in (nn.Linear, nn.Conv2d)
    ]
    if last_k is not None:
        if last_k < 1:
            raise ValueError(f"last_k must be >= 1, got {last_k}")
        found = found[-last_k:]
    for parent, name, child in found:
        if isinstance(child, nn.Conv2d):
            setattr(parent, name, BayesConv2d.from_conv2d(child, prior, init_rho, conv_estimator))
        else:
            setattr(parent, name, BayesLinear.from_linear(child, prior, init_rho))
    layers = [m for m in model.modules() if isinstance(m, _BayesLayer)]
    if not layers:
        raise ValueError(
            f"Bayes by Backprop needs Linear or Conv2d layers; {type(model).__name__} has none"
        )
    return layers


BayesLayer = _BayesLayer
