"""DDU's feature density: Gaussian discriminant analysis on a network's penultimate features.

Per class c: the mean μ_c and covariance Σ_c of the training features of that class (``n_c - 1``
in the denominator), the prior π_c = n_c / N, and the Cholesky factor of ``Σ_c + ε I`` with the
smallest jitter ε of ``jitter, 1e-12, 1e-11, ..., 1`` (all relative to the mean feature
variance; those below ``jitter`` skipped) under which every factor exists (the authors' search
from 0, made scale-free).
The log density of a feature vector z is

    log q(z) = logsumexp_c [log π_c + log N(z; μ_c, Σ_c + ε I)],

low far from the training features (the epistemic score). A class without training rows has
π_c = 0 and no part in q. Everything is kept and computed in float64 as buffers, so the density
travels with the network's ``state_dict`` (bundles).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

#: relative jitters tried after the configured one, smallest first
JITTERS = tuple(10.0**e for e in range(-12, 1))


class ClassDensity(nn.Module):
    """Class-conditional Gaussians over ``features``-dimensional vectors for ``classes`` classes
    (buffers: ``means [C, D]``, ``cholesky [C, D, D]``, ``log_priors [C]``, ``jitter``,
    ``fitted``)."""

    means: Tensor
    cholesky: Tensor
    log_priors: Tensor
    jitter: Tensor
    fitted: Tensor

    def __init__(self, classes: int, features: int) -> None:
        super().__init__()
        f64 = torch.float64
        self.register_buffer("means", torch.zeros(classes, features, dtype=f64))
        eye = torch.eye(features, dtype=f64).expand(classes, features, features).clone()
        self.register_buffer("cholesky", eye)
        self.register_buffer("log_priors", torch.full((classes,), -math.log(classes), dtype=f64))
        self.register_buffer("jitter", torch.zeros((), dtype=f64))
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))

    @property
    def classes(self) -> int:
        return int(self.means.shape[0])

    @torch.no_grad()
    def fit(self, z: Tensor, y: Tensor, jitter: float = 0.0) -> None:
        """Fit on features ``z [N, D]`` and class labels ``y [N]`` (in 0..C-1); ``jitter``:
        the smallest relative jitter tried."""
        c, d = self.means.shape
        if z.dim() != 2 or z.shape[1] != d:
            raise ValueError(f"features must have shape [N, {d}], got {list(z.shape)}")
        z, y = z.to(self.means), y.to(self.means.device).long()
        counts = torch.bincount(y, minlength=c).to(z)  # [C]
        means = torch.zeros_like(self.means).index_add_(0, y, z) / counts.clamp(min=1)[:, None]
        cov = torch.zeros(c, d, d, dtype=z.dtype, device=z.device)
        for k in range(c):  # one class at a time: [N_c, D] rows, never [N, D, D]
            centred = z[y == k] - means[k]
            cov[k] = centred.T @ centred / max(len(centred) - 1, 1)
        present = counts > 0
        cov[~present] = torch.eye(d, dtype=z.dtype, device=z.device)
        scale = float(torch.diagonal(cov[present], dim1=-2, dim2=-1).mean()) or 1.0
        eye = torch.eye(d, dtype=z.dtype, device=z.device)
        chol = None
        for eps in (jitter * scale, *(j * scale for j in JITTERS if j > jitter)):
            chol, info = torch.linalg.cholesky_ex(cov + eps * eye)
            if not info.any():
                break
        else:
            raise ValueError("the class covariances are not positive definite even with jitter 1")
        self.means.copy_(means)
        self.cholesky.copy_(chol)
        self.log_priors.copy_(torch.where(present, (counts / counts.sum()).log(), -math.inf))
        self.jitter.fill_(eps)
        self.fitted.fill_(True)

    def class_log_density(self, z: Tensor) -> Tensor:
        """``log π_c + log N(z; μ_c, Σ_c)`` for features ``z [N, D]``: ``[N, C]`` (float64)."""
        if not bool(self.fitted):
            raise RuntimeError("the feature density is not fitted: fit the method on training data")
        z = z.to(self.means)
        diff = (z[None] - self.means[:, None]).transpose(1, 2)  # [C, D, N]
        white = torch.linalg.solve_triangular(self.cholesky, diff, upper=False)  # [C, D, N]
        maha = (white**2).sum(1)  # [C, N]
        logdet = 2 * torch.diagonal(self.cholesky, dim1=-2, dim2=-1).log().sum(-1)  # [C]
        d = z.shape[1]
        log_n = -0.5 * (maha + logdet[:, None] + d * math.log(2 * math.pi))  # [C, N]
        out: Tensor = (log_n + self.log_priors[:, None]).T
        return out

    def log_density(self, z: Tensor) -> Tensor:
        """``log q(z)`` for features ``z [N, D]``: ``[N]`` (float64)."""
        out: Tensor = torch.logsumexp(self.class_log_density(z), dim=-1)
        return out
