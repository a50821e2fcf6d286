"""SNGP's output layer: a Gaussian process by random Fourier features with a Laplace posterior
over its output weights (Liu et al. 2020, §3.2; Rahimi & Recht 2007).

The layer maps features ``h [N, D]`` to ``φ(h) = √(2/M) cos(h Wᵀ/ℓ + b)`` ``[N, M]`` with fixed
``W ~ N(0, 1)`` ``[M, D]`` and ``b ~ U(0, 2π)`` (an RBF kernel of lengthscale ℓ), and to logits
``φ βᵀ`` ``[N, C]`` with the trainable β ``[C, M]``. Its posterior covariance over each class's β
is ``Σ = s · (s·I + Σ_i w_i φ_i φ_iᵀ)⁻¹`` (ridge s, row weights w_i; set by
:meth:`RandomFeatureGP.set_precision`), so the GP variance of a row is ``φ Σ φᵀ``, the same for
every class; before it is set Σ = I, the prior.

Inside a sampling block of G groups (the rows of every group being the same feature rows, the
body before the layer being deterministic) each group's logits are drawn as
``φβᵀ + √(φΣφᵀ) · z``, C standard normals z per (group, row) from the row's own stream
(:meth:`~bayesify.nn.row_noise.RowNoise.row_normal`, drawn on CPU for every device: chunks of
rows, ranges of groups and devices give the same numbers); with ``mean_field=True`` nothing is
drawn and every group gets the mean-field logits ``φβᵀ / √(1 + λ·φΣφᵀ)``. Outside a sampling
block the layer gives ``φβᵀ``, the posterior mean (training, validation).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from bayesify.nn.row_noise import RowNoise
from bayesify.nn.stochastic import SamplingPlan, StochasticModule


class RandomFeatureGP(StochasticModule):
    """A random-feature GP layer ``[N, D] -> [N, C]`` with a Laplace posterior over β."""

    feature_weight: Tensor
    feature_bias: Tensor
    covariance: Tensor

    def __init__(
        self,
        in_features: int,
        out_features: int,
        num_features: int = 1024,
        lengthscale: float = 1.0,
        *,
        mean_field: bool = False,
        mean_field_factor: float = math.pi / 8,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        if min(in_features, out_features, num_features) < 1:
            raise ValueError("in_features, out_features and num_features must be >= 1")
        if lengthscale <= 0:
            raise ValueError(f"lengthscale must be > 0, got {lengthscale}")
        self.in_features, self.out_features = in_features, out_features
        self.num_features = num_features
        self.mean_field, self.mean_field_factor = mean_field, mean_field_factor
        w = torch.randn(num_features, in_features, generator=generator) / lengthscale
        b = torch.rand(num_features, generator=generator) * (2 * math.pi)
        bound = 1 / math.sqrt(num_features)
        beta = (torch.rand(out_features, num_features, generator=generator) * 2 - 1) * bound
        self.register_buffer("feature_weight", w.to(dtype))
        self.register_buffer("feature_bias", b.to(dtype))
        self.register_buffer("covariance", torch.eye(num_features, dtype=dtype))
        self.beta = nn.Parameter(beta.to(dtype))
        self.noise = RowNoise()  # the per-row keys of the sampled logits

    def features(self, h: Tensor) -> Tensor:
        """``φ(h) = √(2/M) cos(h Wᵀ + b)``: ``[N, D] -> [N, M]``."""
        z = torch.addmm(self.feature_bias, h, self.feature_weight.t())
        return math.sqrt(2.0 / self.num_features) * torch.cos(z)

    def moments(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """The posterior mean logits ``[N, C]`` and GP variance ``[N]`` at features ``h``."""
        phi = self.features(h)
        var = ((phi @ self.covariance) * phi).sum(-1).clamp_min(0.0)
        return phi @ self.beta.t(), var

    def set_precision(self, precision: Tensor, ridge: float) -> None:
        """Σ = ridge · P⁻¹ from the precision ``P = ridge·I + Σ w φφᵀ`` ``[M, M]`` (float64
        Cholesky; symmetric by construction)."""
        p = precision.double()
        cov = torch.cholesky_inverse(torch.linalg.cholesky(0.5 * (p + p.t())))
        self.covariance.copy_((ridge * cov).to(self.covariance))

    def begin_sampling(self, plan: SamplingPlan) -> None:
        super().begin_sampling(plan)
        if not self.mean_field:
            self.noise.begin(plan.samples, plan.generator)

    def select_groups(self, start: int, stop: int) -> None:
        super().select_groups(start, stop)
        if self.noise.active:
            self.noise.select_groups(start, stop)

    def end_sampling(self) -> None:
        super().end_sampling()
        self.noise.end()

    def group_bytes(self) -> int:
        """One int64 key per group (none for the mean-field logits)."""
        return 0 if self.mean_field else 8

    def forward(self, x: Tensor) -> Tensor:
        """``x [G*n, D]`` -> ``[G*n, C]``: the mean logits outside a sampling block; inside it,
        group g's drawn (or mean-field) logits of the rows ``x`` holds for every group."""
        if x.shape[-1] != self.in_features:
            raise ValueError(f"the GP layer takes {self.in_features} features, got {x.shape[-1]}")
        flat = x.reshape(-1, self.in_features)
        if not self.stochastic:
            return (self.features(flat) @ self.beta.t()).reshape(*x.shape[:-1], -1)
        groups = self.groups
        if len(flat) % groups:
            raise ValueError(f"{len(flat)} rows do not split into {groups} sample groups")
        rows = flat.reshape(groups, -1, self.in_features)[0]  # every group: the same rows
        out = self.group_outputs(rows).reshape(len(flat), self.out_features)
        return out.reshape(*x.shape[:-1], self.out_features)

    def group_outputs(self, rows: Tensor) -> Tensor:
        """Every group's logits for the same feature ``rows [n, D]``: ``[G, n, C]``, the
        moments computed once per row."""
        mean, var = self.moments(rows)
        n, groups = rows.shape[0], self.groups
        if self.mean_field:
            scaled = mean / torch.sqrt(1.0 + self.mean_field_factor * var)[:, None]
            return scaled.unsqueeze(0).expand(groups, n, self.out_features)
        total = groups * n
        # drawn on CPU whatever the device (C numbers a row and group): a GPU gives the CPU's
        # samples for the same seed
        z = self.noise.row_normal(total, self.out_features, torch.device("cpu"), dtype=rows.dtype)
        self.noise.advance(total)
        z = z.view(groups, n, self.out_features).to(rows.device)
        return mean + var.sqrt()[:, None] * z
