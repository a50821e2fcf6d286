"""Node noise for implicit BNNs (Trinh et al.): a multiplicative latent z per input node.

Every ``nn.Linear`` / ``nn.Conv1d/2d`` gets a :class:`NodeNoise` in front of it, so the layer
sees ``x ∘ z`` with z of shape ``[rows, in_features]`` (linear) or ``[rows, in_channels]`` (conv,
broadcast over space). The posterior per layer is an equal-weight mixture of K diagonal Gaussians
N(μ_k, σ_k²); the prior is N(1, s²).

Randomness (shared with :mod:`bayesify.nn.stochastic_scale` through :class:`PerGroupNoise`):

* inside :func:`bayesify.nn.sampling` every sample group t draws from its own generator, seeded
  from the caller's generator in ``begin_sampling``. Rows of a group are drawn in order from that
  generator as uniforms (``torch.rand`` on CPU is a serial stream) mapped through the normal
  quantile, so splitting N into chunks gives the same numbers as one pass, and the loop of T
  passes (:func:`only_group`) replays group t exactly. Group t uses mixture component t mod K.
* in training (:func:`noisy_training`) each row draws from the global torch RNG with the
  component assigned to it (Trinh et al. Algorithm 1: the mini-batch split evenly over K).
* otherwise the layer is deterministic: z = mixture mean (1/K) Σ_k μ_k.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.nn.stochastic import StochasticModule

_SEED_HIGH = 2**62
_U_EPS = 1e-7


class PerGroupNoise(StochasticModule):
    """A stochastic layer drawing standard normal noise per row: per-group generators while
    sampling, the global RNG while :func:`noisy_training` is on, none otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.train_noise = False
        self._gens: list[torch.Generator] | None = None
        self._group_ids: list[int] | None = None

    def begin_sampling(self, samples: int, generator: torch.Generator | None) -> None:
        super().begin_sampling(samples, generator)
        seeds = torch.randint(0, _SEED_HIGH, (samples,), generator=generator)  # [T]
        self._gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self._group_ids = list(range(samples))

    def end_sampling(self) -> None:
        super().end_sampling()
        self._gens = None
        self._group_ids = None

    @property
    def sampling_active(self) -> bool:
        return self.stochastic and self._gens is not None

    def group_ids(self, device: torch.device) -> Tensor:
        """Global sample-group index of each group in the current pass ``[G]``."""
        assert self._group_ids is not None
        return torch.tensor(self._group_ids, device=device)

    def group_normal(self, rows: int, width: int, ref: Tensor) -> Tensor:
        """Standard normals ``[G, rows // G, width]``: group g's rows continue its own stream."""
        assert self._gens is not None and self._group_ids is not None
        g = len(self._group_ids)
        if rows % g:
            raise ValueError(f"{rows} rows do not split into {g} sample groups")
        n = rows // g
        u = torch.stack([torch.rand(n, width, generator=self._gens[t]) for t in self._group_ids])
        eps = torch.special.ndtri(u.clamp(_U_EPS, 1 - _U_EPS))  # [G, n, width]
        return eps.to(device=ref.device, dtype=ref.dtype)


@contextmanager
def only_group(model: nn.Module, t: int) -> Iterator[None]:
    """Inside :func:`sampling`, make every :class:`PerGroupNoise` layer treat the next passes as
    sample group ``t`` alone (the loop reference); its generator stream continues."""
    layers = [m for m in model.modules() if isinstance(m, PerGroupNoise)]
    saved = [(m._group_ids, m.groups) for m in layers]
    for m in layers:
        if m._gens is None or not 0 <= t < len(m._gens):
            raise RuntimeError("only_group needs an active sampling block with group t")
        m._group_ids, m.groups = [t], 1
    try:
        yield
    finally:
        for m, (ids, groups) in zip(layers, saved, strict=True):
            m._group_ids, m.groups = ids, groups


@contextmanager
def noisy_training(model: nn.Module) -> Iterator[None]:
    """Within the block, :class:`PerGroupNoise` layers draw per-row noise from the global RNG."""
    layers = [m for m in model.modules() if isinstance(m, PerGroupNoise)]
    for m in layers:
        m.train_noise = True
    try:
        yield
    finally:
        for m in layers:
            m.train_noise = False


def inverse_softplus(y: float) -> float:
    """x with softplus(x) = y (y > 0)."""
    return y + math.log(-math.expm1(-y))


class NodeNoise(PerGroupNoise):
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
        """z for every row ``[rows, F]`` (sampling, training or mean mode)."""
        if self.sampling_active:
            k = self.component_of_group(self.group_ids(ref.device))  # [G]
            eps = self.group_normal(rows, self.features, ref)  # [G, n, F]
            z = self.mu[k].unsqueeze(1) + self.sigma[k].unsqueeze(1) * eps
            return z.reshape(rows, self.features)
        if self.train_noise:
            if self.train_components is None or len(self.train_components) != rows:
                raise RuntimeError("noisy training needs a mixture component for every row")
            k = self.train_components.to(ref.device)  # [rows]
            eps = torch.randn(rows, self.features, device=ref.device, dtype=ref.dtype)
            return self.mu[k] + self.sigma[k] * eps
        return self.mu.mean(0).expand(rows, self.features)

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
