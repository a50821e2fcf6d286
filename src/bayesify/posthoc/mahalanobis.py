"""The Mahalanobis OOD score (Lee et al. 2018): class-conditional Gaussians with one shared
covariance on a network's penultimate features, fitted on training rows.

Fitted on features ``h [N, D]`` and labels ``y [N]``: the class means ``μ_c`` and the shared
covariance ``Σ = (1/N) Σ_i (h_i − μ_{y_i})(h_i − μ_{y_i})ᵀ`` (maximum likelihood, as the paper's
``EmpiricalCovariance`` on class-centred features). The score of a row is its smallest squared
distance to a class mean, ``min_c (h − μ_c)ᵀ Σ⁻¹ (h − μ_c)``: minus the paper's confidence score
``M(x)``, so higher = more likely out of distribution. The precision is the pseudo-inverse, as
the paper's code takes it (features of a ReLU network often have dead, constant units). Without
the paper's input preprocessing (a gradient step on the input) and without its ensemble of
layers: one layer's features, no tuning on OOD data.

Stored as JSON in ``method.metadata["mahalanobis"]`` (:meth:`MahalanobisFit.to_dict`), saved
with the bundle: ``C·D + D²`` numbers (LeNet's 84 features: about 8,000).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

#: where a bundle keeps its fit
METADATA_KEY = "mahalanobis"


@dataclass(frozen=True)
class MahalanobisFit:
    """Class means ``[C, D]`` and the shared precision ``[D, D]`` (float64)."""

    means: Tensor
    precision: Tensor

    @classmethod
    def fit(cls, features: Tensor, labels: Tensor, classes: int | None = None) -> MahalanobisFit:
        """Fit on ``features [N, D]`` with class labels ``labels [N]`` (every class of
        ``0..classes−1`` needs a row)."""
        h = torch.as_tensor(features).detach().double().cpu()
        y = torch.as_tensor(labels).detach().long().cpu().reshape(-1)
        if h.dim() != 2 or len(h) != len(y) or len(h) < 2:
            raise ValueError(f"features must be [N, D] with N >= 2 labels [N], got "
                             f"{list(h.shape)} and {list(y.shape)}")  # fmt: skip
        if not torch.isfinite(h).all():
            raise ValueError("features contain non-finite values")
        c = int(y.max()) + 1 if classes is None else classes
        counts = torch.bincount(y, minlength=c)
        if (y < 0).any() or len(counts) > c or (counts == 0).any():
            missing = torch.nonzero(counts == 0).flatten()[:5].tolist()
            raise ValueError(f"labels must be class indices 0..{c - 1}, each with a training row "
                             f"(none for {missing})")  # fmt: skip
        means = torch.zeros(c, h.shape[1], dtype=torch.float64).index_add_(0, y, h)
        means /= counts.unsqueeze(1)
        centred = h - means[y]
        cov = centred.T @ centred / len(h)
        return cls(means, torch.linalg.pinv(cov, hermitian=True))

    def distances(self, features: Tensor) -> Tensor:
        """Squared Mahalanobis distance of every row to every class mean: ``[N, C]``."""
        h = torch.as_tensor(features).detach().double().cpu()
        if h.dim() != 2 or h.shape[1] != self.means.shape[1]:
            raise ValueError(f"features must be [N, {self.means.shape[1]}], got {list(h.shape)}")
        d = h.unsqueeze(1) - self.means.unsqueeze(0)  # [N, C, D]
        return torch.einsum("ncd,de,nce->nc", d, self.precision, d)

    def score(self, features: Tensor) -> Tensor:
        """The OOD score ``[N]`` (float64): the smallest squared distance to a class mean."""
        return self.distances(features).amin(-1)

    def to_dict(self) -> dict[str, Any]:
        return {"means": self.means.tolist(), "precision": self.precision.tolist()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MahalanobisFit:
        try:
            means = torch.tensor(d["means"], dtype=torch.float64)
            precision = torch.tensor(d["precision"], dtype=torch.float64)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a Mahalanobis fit: {e}") from None
        dim = means.shape[-1] if means.dim() == 2 else -1
        if means.dim() != 2 or precision.shape != (dim, dim):
            raise ValueError(f"not a Mahalanobis fit: means {list(means.shape)}, precision "
                             f"{list(precision.shape)}")  # fmt: skip
        return cls(means, precision)
