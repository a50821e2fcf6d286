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
  torch RNG with the component assigned to it (Trinh et al. Algorithm 1: the mini-batch split
  evenly over K).
* otherwise the layer is deterministic: z = mixture mean (1/K) Σ_k μ_k.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

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
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if components < 1:
            raise ValueError(f"components must be >= 1, got {components}")
        if sigma_init <= 0:
            raise ValueError(f"sigma_init must be > 0, got {sigma_init}")
        self.features, self.components = features, components
        mu = 1.0 + mu_init_std * torch.randn(components, features, generator=generator)
        self.mu = nn.Parameter(mu)  # [K, F]
        self.rho = nn.Parameter(torch.full((components, features), inverse_softplus(sigma_init)))
        self.train_components: Tensor | None = None  # [rows] component per row, training only

    def extra_repr(self) -> str:
        return f"{self.features}, components={self.components}"

    @property
    def sigma(self) -> Tensor:
        """Component standard deviations ``[K, F]``."""
        return F.softplus(self.rho)

    def component_of_group(self, t: Tensor) -> Tensor:
        """Mixture component used by sample group t: t mod K."""
        return t % self.components

    def draw(self, rows: int, ref: Tensor) -> Tensor:
        """z for every row ``[rows, F]`` (sampling, training or mean mode); once per forward."""
        sampling = self.sampling_active
        needs_components = self.train_noise and not sampling
        if needs_components and (
            self.train_components is None or len(self.train_components) != rows
        ):
            raise RuntimeError("noisy training needs a mixture component for every row")
        eps = self.standard_normal(rows, self.features, ref)  # [rows, F], None: deterministic
        if eps is None:
            return self.mu.mean(0).expand(rows, self.features)
        if sampling:
            k = self.component_of_group(self.noise.group_ids(ref.device))  # [G] global t mod K
            eps = eps.view(len(k), -1, self.features)  # [G, n, F]
            z = self.mu[k].unsqueeze(1) + self.sigma[k].unsqueeze(1) * eps
            return z.reshape(rows, self.features)
        k = self.train_components.to(ref.device)  # [rows]
        return self.mu[k] + self.sigma[k] * eps

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() < 2 or x.shape[1] != self.features:
            raise ValueError(
                f"NodeNoise expected input [N, {self.features}, ...], got {list(x.shape)}"
            )
        z = self.draw(x.shape[0], x)  # [rows, F]
        return x * z.view(*z.shape, *([1] * (x.dim() - 2)))

    def mixture_mean_gaussian(self) -> tuple[Tensor, Tensor]:
        """Trinh et al. eq. 22–24: mean (1/K)Σμ_k and variance (1/K²)Σσ_k², both ``[F]``."""
        k = self.components
        return self.mu.mean(0), self.sigma.pow(2).sum(0) / k**2

    def kl(self, prior_std: float) -> Tensor:
        """KL(q̂ ‖ N(1, s²)) summed over features (eq. 22–24), a scalar."""
        mean, var = self.mixture_mean_gaussian()
        s2 = prior_std**2
        return 0.5 * (math.log(s2) - var.log() + (var + (mean - 1.0) ** 2) / s2 - 1.0).sum()


NOISY_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d)


def add_node_noise(
    model: nn.Module,
    components: int = 4,
    *,
    mu_init_std: float = 0.1,
    sigma_init: float = 0.05,
    generator: torch.Generator | None = None,
) -> list[NodeNoise]:
    """Put a :class:`NodeNoise` in front of every Linear/Conv layer of ``model`` (in place): the
    layer becomes ``nn.Sequential(NodeNoise, layer)``. Returns the noise layers in order."""
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
            generator=generator,
        ).to(device=child.weight.device, dtype=child.weight.dtype)
        setattr(parent, name, nn.Sequential(noise, child))
    layers = [m for m in model.modules() if isinstance(m, NodeNoise)]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no Linear or Conv layer to add node noise to")
    return layers
