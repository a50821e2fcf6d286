"""Node noise for implicit BNNs (Trinh et al.): a multiplicative latent z per input node.

Every ``nn.Linear`` / ``nn.Conv1d/2d`` gets a :class:`NodeNoise` in front of it, so the layer
sees ``x ∘ z`` with z of shape ``[rows, in_features]`` (linear) or ``[rows, in_channels]`` (conv,
broadcast over space). The posterior per layer is an equal-weight mixture of K diagonal Gaussians
N(μ_k, σ_k²); the prior is N(1, s²).

Randomness (per row, as every row-noise layer: :mod:`bayesify.nn.row_noise`):

* inside :func:`bayesify.nn.sampling` the standard normal ε of (group t, data row i, feature j)
  is a hash of (key_t, i, j) (:class:`~bayesify.nn.row_noise.RowNoise`, keys drawn from the
  caller's generator), and z = μ_k + σ_k ε with k = t mod K, t the group's global index. So
  splitting N into chunks, running a range of groups alone (``select_groups``) or the loop of T
  passes (:func:`~bayesify.nn.stochastic.reference_loop`) all give the same z per group and row.
* in training (:func:`~bayesify.nn.row_noise.noisy_training`) each row draws from the global
  torch RNG with the component assigned to it (Trinh et al. Algorithm 1): the ``[S·B]`` rows are
  ``train_repeats`` = S stacked copies of a mini-batch of B rows, and row i of a copy uses
  component ⌊iK/B⌋ (the batch split evenly over K in contiguous blocks; the loader shuffles).
  When K divides B the draw is one fused autograd node
  (:func:`~bayesify.nn.mixture_posterior.block_noise_input`).
* otherwise the layer is deterministic: z = mixture mean (1/K) Σ_k μ_k.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.nn.mixture_posterior import block_noise_input, mixture_mean_kl
from bayesify.nn.row_noise import TrainingNoiseModule


def inverse_softplus(y: float) -> float:
    """x with softplus(x) = y (y > 0)."""
    return y + math.log(-math.expm1(-y))


class NodeNoise(TrainingNoiseModule):
    """Multiplicative mixture-of-Gaussians node noise on ``[rows, F, ...]`` inputs."""

    def __init__(
        self,
        features: int,
        components: int = 4,
        *,
        mu_init_std: float = 0.1,
        sigma_init: float = 0.05,
        sigma_init_std: float = 0.0,
        train_repeats: int = 1,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if train_repeats < 1:
            raise ValueError(f"train_repeats must be >= 1, got {train_repeats}")
        if components < 1:
            raise ValueError(f"components must be >= 1, got {components}")
        if sigma_init <= 0:
            raise ValueError(f"sigma_init must be > 0, got {sigma_init}")
        self.features, self.components = features, components
        mu = 1.0 + mu_init_std * torch.randn(components, features, generator=generator)
        self.mu = nn.Parameter(mu)  # [K, F]
        if sigma_init_std > 0:  # σ ~ N(sigma_init, sigma_init_std²), kept positive (Trinh et al.)
            sigma = sigma_init + sigma_init_std * torch.randn(
                components, features, generator=generator
            )
            sigma = sigma.clamp_min(sigma_init / 10)
            self.rho = nn.Parameter(torch.log(torch.expm1(sigma)))  # softplus⁻¹, elementwise
        else:
            self.rho = nn.Parameter(
                torch.full((components, features), inverse_softplus(sigma_init))
            )
        self.train_repeats = train_repeats  # S copies of the mini-batch per training pass

    def extra_repr(self) -> str:
        return f"{self.features}, components={self.components}"

    @property
    def sigma(self) -> Tensor:
        """Component standard deviations ``[K, F]``."""
        return F.softplus(self.rho)

    def component_of_group(self, t: Tensor) -> Tensor:
        """Mixture component used by sample group t: t mod K."""
        return t % self.components

    def training_components(self, rows: int) -> Tensor:
        """Mixture component of every training row ``[rows]``: ``train_repeats`` copies of a
        mini-batch of B rows, row i of each using component ⌊iK/B⌋."""
        s = self.train_repeats
        if rows % s:
            raise ValueError(f"{rows} training rows are not {s} copies of a mini-batch")
        b = rows // s
        return (torch.arange(b) * self.components // b).repeat(s)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() < 2 or x.shape[1] != self.features:
            raise ValueError(
                f"NodeNoise expected input [N, {self.features}, ...], got {list(x.shape)}"
            )
        rows, spatial = x.shape[0], [1] * (x.dim() - 2)
        eps = self.standard_normal(rows, self.features, x)  # [rows, F]; None: deterministic
        if eps is None:
            return x * self.mu.mean(0).view(1, self.features, *spatial)
        if self.sampling_active:
            k = self.component_of_group(self.noise.group_ids(x.device))  # [G] global t mod K
            e = eps.view(len(k), -1, self.features)  # [G, n, F]
            z = (self.mu[k].unsqueeze(1) + self.sigma[k].unsqueeze(1) * e).reshape_as(eps)
        elif rows % (self.train_repeats * self.components) == 0:
            return block_noise_input(x, self.mu, self.rho, eps, self.train_repeats)
        else:  # a mini-batch that does not split evenly: gather each row's component
            k = self.training_components(rows).to(x.device)  # [rows]
            z = self.mu[k] + self.sigma[k] * eps
        return x * z.view(*z.shape, *spatial)

    def mixture_mean_gaussian(self) -> tuple[Tensor, Tensor]:
        """Trinh et al. eq. 22–24: mean (1/K)Σμ_k and variance (1/K²)Σσ_k², both ``[F]``."""
        k = self.components
        return self.mu.mean(0), self.sigma.pow(2).sum(0) / k**2

    def kl(self, prior_std: float) -> Tensor:
        """KL(q̂ ‖ N(1, s²)) summed over features (eq. 22–24), a scalar."""
        return mixture_mean_kl([(self.mu, self.rho)], prior_std)


NOISY_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d)


def add_node_noise(
    model: nn.Module,
    components: int = 4,
    *,
    mu_init_std: float = 0.1,
    sigma_init: float = 0.05,
    sigma_init_std: float = 0.0,
    train_repeats: int = 1,
    generator: torch.Generator | None = None,
) -> list[NodeNoise]:
    """Put a :class:`NodeNoise` in front of every Linear/Conv layer of ``model`` (in place): the
    layer becomes ``nn.Sequential(NodeNoise, layer)``. Returns the noise layers in order.
    ``train_repeats``: the S copies of each mini-batch a training pass carries."""
    targets = [
        (parent, name, child)
        for parent in model.modules()
        if not (isinstance(parent, nn.Sequential) and any(isinstance(c, NodeNoise) for c in parent))
        for name, child in parent.named_children()
        if isinstance(child, NOISY_LAYERS)
    ]
    for parent, name, child in targets:
        features = child.in_features if isinstance(child, nn.Linear) else child.in_channels
        noise = NodeNoise(
            features,
            components,
            mu_init_std=mu_init_std,
            sigma_init=sigma_init,
            sigma_init_std=sigma_init_std,
            train_repeats=train_repeats,
            generator=generator,
        ).to(device=child.weight.device, dtype=child.weight.dtype)
        setattr(parent, name, nn.Sequential(noise, child))
    layers = [m for m in model.modules() if isinstance(m, NodeNoise)]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no Linear or Conv layer to add node noise to")
    return layers
