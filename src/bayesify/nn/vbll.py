"""A variational Bayesian last layer (Harrison, Willes & Snoek, ICLR 2024): a Gaussian over the
last linear layer's weights, with the moments its closed-form training bound needs.

Output k's weights, bias included as the last entry (the features get a constant 1:
``φ̃ = [φ, 1]``, D = in + 1), follow ``q(w_k) = N(w̄_k, S_k)``. The mean is the layer's own
``weight [out, in]`` and ``bias [out]`` (so outside a sampling block the layer is the plain layer
at the posterior mean); ``S_k`` is parametrised as

- ``diagonal``: ``S_k = diag(exp(2 log_diag_k))``;
- ``dense``: ``S_k = L_k L_kᵀ`` with ``L_k = diag(exp(log_diag_k)) + tril(off_diag_k, -1)``;
- ``lowrank``: ``S_k = diag(exp(2 log_diag_k)) + U_k U_kᵀ`` with ``U_k [D, rank]``.

A learned diagonal noise variance ``σ_k² = exp(noise_log_var_k)`` belongs to the layer too (the
regression noise, or the logit noise of the discriminative classifier's bound). Inside a sampling
block the layer is a :class:`~bayesify.nn.sampled_linear.SampledLinear` drawing its T weights
from q.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor, nn

from bayesify.nn.sampled_linear import SampledLinear, draw_on, last_linear
from bayesify.nn.stochastic import SamplingPlan

#: the covariance parametrisations of q(w_k)
COVARIANCES = ("diagonal", "dense", "lowrank")


class VBLLLinear(SampledLinear):
    """``nn.Linear`` with a Gaussian posterior over its weights and a learned noise variance:
    ``[N, in]`` -> ``[N, out]`` (the posterior mean; per-group draws inside a sampling block)."""

    _plain_attrs = SampledLinear._plain_attrs | {"capture", "features"}

    def __init__(
        self,
        linear: nn.Linear,
        covariance: str = "dense",
        rank: int = 2,
        init_std: float | None = None,
        init_noise_variance: float = 1.0,
    ) -> None:
        super().__init__(linear)
        if covariance not in COVARIANCES:
            raise ValueError(f"unknown covariance {covariance!r}; valid: {', '.join(COVARIANCES)}")
        self.covariance = covariance
        w = self.weight
        d = self.in_features + (self.bias is not None)
        std = 1.0 / math.sqrt(d) if init_std is None else init_std
        self.log_diag = nn.Parameter(torch.full((self.out_features, d), math.log(std)).to(w))
        self.off_diag: nn.Parameter | None = None
        if covariance == "dense":
            self.off_diag = nn.Parameter(w.new_zeros(self.out_features, d, d))
        elif covariance == "lowrank":
            self.off_diag = nn.Parameter(w.new_zeros(self.out_features, d, rank))
        self.noise_log_var = nn.Parameter(
            w.new_full((self.out_features,), math.log(init_noise_variance))
        )
        self.capture = False  # while True, forward keeps its input as ``features``
        self.features: Tensor | None = None

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, covariance={self.covariance}"

    # ------------------------------------------------------------------ the posterior's moments
    def mean(self) -> Tensor:
        """``w̄ [out, D]``: the weights with the bias as the last column."""
        if self.bias is None:
            return self.weight
        return torch.cat([self.weight, self.bias[:, None]], dim=1)

    def augment(self, phi: Tensor) -> Tensor:
        """``φ [N, in]`` -> ``φ̃ [N, D]`` (a constant 1 appended when the layer has a bias)."""
        if self.bias is None:
            return phi
        return torch.cat([phi, phi.new_ones(*phi.shape[:-1], 1)], dim=-1)

    def scale_tril(self) -> Tensor:
        """Dense: ``L [out, D, D]`` with ``S_k = L_k L_kᵀ``."""
        assert self.off_diag is not None
        return torch.tril(self.off_diag, diagonal=-1) + torch.diag_embed(self.log_diag.exp())

    def covariance_matrix(self) -> Tensor:
        """``S [out, D, D]`` (built explicitly: for tests and small layers)."""
        if self.covariance == "dense":
            tril = self.scale_tril()
            return tril @ tril.transpose(1, 2)
        s = torch.diag_embed((2 * self.log_diag).exp())
        if self.covariance == "lowrank":
            assert self.off_diag is not None
            s = s + self.off_diag @ self.off_diag.transpose(1, 2)
        return s

    def quadratic(self, phi_aug: Tensor) -> Tensor:
        """``φ̃ᵀ S_k φ̃ [N, out]`` for ``φ̃ [N, D]``: the weights' variance of each output."""
        if self.covariance == "dense":
            return ((phi_aug @ self.scale_tril()) ** 2).sum(-1).T  # ‖L_kᵀφ̃‖²
        out = (phi_aug**2) @ (2 * self.log_diag).exp().T
        if self.covariance == "lowrank":
            assert self.off_diag is not None
            out = out + ((phi_aug @ self.off_diag) ** 2).sum(-1).T
        return out

    def trace(self) -> Tensor:
        """``tr S_k [out]``."""
        out = (2 * self.log_diag).exp().sum(-1)
        if self.off_diag is None:
            return out
        off = (
            torch.tril(self.off_diag, diagonal=-1) if self.covariance == "dense" else self.off_diag
        )
        return out + (off**2).sum((-2, -1))

    def logdet(self) -> Tensor:
        """``log det S_k [out]`` (low rank: the matrix determinant lemma)."""
        out = 2 * self.log_diag.sum(-1)
        if self.covariance == "lowrank":
            assert self.off_diag is not None
            u = self.off_diag * (-self.log_diag).exp()[..., None]  # D^{-1/2} U
            eye = torch.eye(u.shape[-1], dtype=u.dtype, device=u.device)
            out = out + torch.logdet(eye + u.transpose(1, 2) @ u)
        return out

    def kl(self, prior_variance: float) -> Tensor:
        """``Σ_k KL(N(w̄_k, S_k) ‖ N(0, prior_variance·I))`` (0-dim)."""
        d = self.log_diag.shape[-1]
        mean_sq = (self.mean() ** 2).sum(-1)
        return (
            0.5
            * (
                (self.trace() + mean_sq) / prior_variance
                - d
                + d * math.log(prior_variance)
                - self.logdet()
            ).sum()
        )

    def noise_variance(self) -> Tensor:
        """``σ_k² [out]``."""
        return self.noise_log_var.exp()

    # ------------------------------------------------------------------ sampling
    def draw(self, groups: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor | None]:
        """``groups`` draws of q: weights ``[G, out, in]`` and biases ``[G, out]`` (or None)."""
        with torch.no_grad():
            out, d = self.log_diag.shape
            z = draw_on(generator, (groups, out, d)).to(self.log_diag.device)
            if self.covariance == "dense":
                noise = torch.einsum("kij,gkj->gki", self.scale_tril().double(), z)
            else:
                noise = z * self.log_diag.double().exp()
            if self.covariance == "lowrank":
                assert self.off_diag is not None
                r = self.off_diag.shape[-1]
                z2 = draw_on(generator, (groups, out, r)).to(self.log_diag.device)
                noise = noise + torch.einsum("kir,gkr->gki", self.off_diag.double(), z2)
            w = self.mean().double() + noise
        if self.bias is None:
            return w, None
        return w[..., :-1], w[..., -1]

    def begin_sampling(self, plan: SamplingPlan) -> None:
        """Draw the block's T weights from q (unless ``plan`` hands this layer its own)."""
        if plan.draw_for(self) is None:
            draws = {**plan.draws, self: self.draw(plan.samples, plan.generator)}
            plan = replace(plan, draws=draws)
        super().begin_sampling(plan)

    def draws(self) -> tuple[Tensor, Tensor | None]:
        """Inside a sampling block: the selected groups' weights ``[G, out, in]`` and biases
        ``[G, out]`` (or None), in the layer's dtype."""
        if self._draw is None:
            raise RuntimeError("VBLLLinear.draws needs an active sampling block")
        return self._draw

    def forward(self, x: Tensor) -> Tensor:
        if self.capture:
            self.features = x
        return super().forward(x)


def vbll_last_layer(
    net: nn.Module,
    covariance: str = "dense",
    rank: int = 2,
    init_std: float | None = None,
    init_noise_variance: float = 1.0,
) -> VBLLLinear:
    """Replace the last ``nn.Linear`` of ``net`` (in place) by a :class:`VBLLLinear` whose mean
    is that layer's weights (the other arguments: :class:`VBLLLinear`'s); returns it."""
    parent, name, layer = last_linear(net)
    new = VBLLLinear(layer, covariance, rank, init_std, init_noise_variance)
    new = new.to(layer.weight.device).train(layer.training)
    setattr(parent, name, new)
    return new
