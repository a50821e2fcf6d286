"""Stochastic normalisation (Shekhovtsov & Flach 2018): weight normalisation followed by a
stochastic per-channel scale.

:class:`StochasticScale` wraps a Linear/Conv layer with weight ``w [C_out, ...]`` and computes

    y = S ⊙ (w x) / ‖w‖ + b,        S ~ N(s, σ²) per row and output channel,

optionally with a stochastic bias b ~ N(b̄, σ_b²). σ is parametrised piecewise, σ = eᵘ for u < 0
and u + 1 for u ≥ 0 (bounded derivatives of both log σ and σ), per channel or one per layer.
Modes (:class:`ScaleNoise`):

* ``learned``: the Bayesian model above, KL(N(s, σ²) ‖ N(1, prior_std²)) per channel;
* ``bn``: "noise like BN" with fixed levels, y = s ⊙ (x̂ + V) ⊙ U + b with x̂ = (w x)/‖w‖,
  V ~ N(0, σ_V²), U ~ N(1, σ_U²) per row and channel (their eq. 7 with a deterministic
  normalisation);
* ``none``: plain weight normalisation y = s ⊙ x̂ + b.

Noise is per row and channel, shared over spatial positions: while sampling, the standard
normals of (group t, data row i, channel j) are hashes of (key_t, i, j) from
:class:`~bayesify.nn.row_noise.RowNoise` (chunk-invariant, replayable per group range); in
training inside :func:`~bayesify.nn.row_noise.noisy_training` they come from torch's global RNG;
otherwise there is no noise (S = s). The noise mode is the layer's ``mode`` (its ``noise`` is
the row-noise source, as in every row-noise layer).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.nn.row_noise import TrainingNoiseModule
from bayesify.options import ScaleNoise, SigmaPer, parse_option


def piecewise_sigma(u: Tensor) -> Tensor:
    """σ = eᵘ for u < 0, u + 1 for u ≥ 0 (continuous with continuous first derivative at 0):
    exactly ELU(u) + 1, two kernels."""
    return F.elu(u) + 1.0


def inverse_piecewise_sigma(sigma: float) -> float:
    """u with piecewise_sigma(u) = sigma (sigma > 0)."""
    if sigma <= 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    return math.log(sigma) if sigma < 1 else sigma - 1.0


def gaussian_kl(mean: Tensor, std: Tensor, prior_mean: float, prior_std: float) -> Tensor:
    """KL(N(mean, std²) ‖ N(prior_mean, prior_std²)) elementwise."""
    var, p2 = std.pow(2), prior_std**2
    return 0.5 * (math.log(p2) - var.log() + (var + (mean - prior_mean) ** 2) / p2 - 1.0)


class StochasticScale(TrainingNoiseModule):
    """Weight-normalised ``layer`` followed by a (stochastic) per-channel scale and bias."""

    def __init__(
        self,
        layer: nn.Linear | nn.Conv1d | nn.Conv2d,
        noise: ScaleNoise | str = ScaleNoise.LEARNED,
        *,
        sigma_per: SigmaPer | str = SigmaPer.CHANNEL,
        sigma_init: float = 0.1,
        stochastic_bias: bool = False,
        bn_mult_std: float = 0.05,
        bn_add_std: float = 0.05,
    ) -> None:
        super().__init__()
        self.mode = parse_option(ScaleNoise, noise, option="noise")
        self.sigma_per = parse_option(SigmaPer, sigma_per, option="sigma_per")
        self.layer = layer
        c = layer.weight.shape[0]
        self.channels = c
        ref = layer.weight
        with torch.no_grad():  # s := ‖w‖ keeps the function of a pretrained layer; then ‖w‖ = 1
            norm = self.weight_norm()
            self.scale = nn.Parameter(norm.clone())  # [C] the mean s of S
            layer.weight.div_(norm.view(-1, *([1] * (ref.dim() - 1))))
        n_u = c if self.sigma_per is SigmaPer.CHANNEL else 1
        u0 = inverse_piecewise_sigma(sigma_init)
        learned = self.mode is ScaleNoise.LEARNED
        self.u = nn.Parameter(torch.full((n_u,), u0, dtype=ref.dtype)) if learned else None
        self.stochastic_bias = stochastic_bias and learned and layer.bias is not None
        self.u_bias = (
            nn.Parameter(torch.full((n_u,), u0, dtype=ref.dtype)) if self.stochastic_bias else None
        )
        self.bn_mult_std, self.bn_add_std = bn_mult_std, bn_add_std
        self.to(device=ref.device)

    def extra_repr(self) -> str:
        return f"noise={self.mode.value}, sigma_per={self.sigma_per.value}"

    def weight_norm(self) -> Tensor:
        """‖w_c‖ per output channel ``[C]``."""
        return self.layer.weight.flatten(1).norm(dim=1)

    @torch.no_grad()
    def project(self) -> None:
        """Project every weight vector onto ‖w_c‖ = 1 (after each optimiser step)."""
        w = self.layer.weight
        w.div_(self.weight_norm().clamp_min(1e-12).view(-1, *([1] * (w.dim() - 1))))

    @property
    def sigma(self) -> Tensor:
        """σ of S per channel ``[C]`` (zeros unless the mode is ``learned``)."""
        if self.u is None:
            return torch.zeros_like(self.scale)
        return piecewise_sigma(self.u).expand(self.channels)

    def prior_parameters(self) -> list[nn.Parameter]:
        """The parameters the prior's KL regularises (s, σ's u, and a stochastic bias's mean
        and u); none in the fixed-noise modes."""
        if self.u is None:
            return []
        params = [self.scale, self.u]
        if self.u_bias is not None:
            params += [self.layer.bias, self.u_bias]
        return params

    def kl(self, prior_std: float = 10.0) -> Tensor:
        """KL(N(s, σ²) ‖ N(1, prior_std²)) summed over channels (+ the bias's to N(0, prior_std²)
        when it is stochastic); zero in the fixed-noise modes."""
        if self.u is None:
            return self.scale.new_zeros(())
        total = gaussian_kl(self.scale, self.sigma, 1.0, prior_std).sum()
        if self.u_bias is not None:
            sb = piecewise_sigma(self.u_bias).expand(self.channels)
            total = total + gaussian_kl(self.layer.bias, sb, 0.0, prior_std).sum()
        return total

    def _linear(self, x: Tensor) -> Tensor:
        """``w x`` without the bias, ``[rows, C, ...]``."""
        w = self.layer.weight
        if isinstance(self.layer, nn.Linear):
            return F.linear(x, w)
        return self.layer._conv_forward(x, w, None)

    def forward(self, x: Tensor) -> Tensor:
        wx = self._linear(x)  # [rows, C, ...]; x̂ = wx / ‖w‖
        rows, c = wx.shape[0], self.channels
        view = (-1, c, *([1] * (wx.dim() - 2)))
        bias, norm = self.layer.bias, self.weight_norm()
        width = 2 * c if (self.mode is ScaleNoise.BN or self.stochastic_bias) else c
        eps = None if self.mode is ScaleNoise.NONE else self.standard_normal(rows, width, wx)
        if self.mode is ScaleNoise.BN and eps is not None:
            u = 1.0 + self.bn_mult_std * eps[:, :c]
            v = self.bn_add_std * eps[:, c:]
            out = (wx / norm.view(view) + v.view(view)) * u.view(view) * self.scale.view(view)
            return out if bias is None else out + bias.view(view)
        if eps is None:  # S = s: one factor s / ‖w‖ per channel
            factor = (self.scale / norm).view(view)
        else:  # S ~ N(s, σ²) per row and channel, folded with 1/‖w‖ into one factor [rows, C]
            factor = (torch.addcmul(self.scale, self.sigma, eps[:, :c]) / norm).view(view)
        out = wx * factor if bias is None else torch.addcmul(bias.view(view), wx, factor)
        if self.u_bias is not None and eps is not None:
            sb = piecewise_sigma(self.u_bias).expand(c)
            out = out + (sb * eps[:, c:]).view(view)
        return out


SCALABLE = (nn.Linear, nn.Conv1d, nn.Conv2d)


def add_stochastic_scale(
    model: nn.Module, *, skip_last: bool = True, **options: object
) -> list[StochasticScale]:
    """Replace Linear/Conv layers of ``model`` (in place) by :class:`StochasticScale` wrappers;
    with ``skip_last`` the final layer (the output) stays plain. Returns the new layers."""
    targets = [
        (parent, name, child)
        for parent in model.modules()
        if not isinstance(parent, StochasticScale)
        for name, child in parent.named_children()
        if isinstance(child, SCALABLE)
    ]
    if skip_last:
        targets = targets[:-1]
    for parent, name, child in targets:
        setattr(parent, name, StochasticScale(child, **options))  # type: ignore[arg-type]
    layers = [m for m in model.modules() if isinstance(m, StochasticScale)]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no Linear/Conv layer to normalise")
    return layers
