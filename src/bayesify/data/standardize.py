"""Per-feature standardisation fitted on training data (the UCI protocol's normaliser)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["Standardizer"]

ArrayLike = torch.Tensor | np.ndarray


@dataclass(frozen=True, eq=False)
class Standardizer:
    """Per-feature affine normalisation fitted on training data.

    ``x_mean``/``x_std``: float64 tensors ``[D]`` (std > 0; a constant feature gets std 1);
    ``y_mean``/``y_std``: floats. ``transform_*`` map original -> normalised units,
    ``inverse_*`` map model outputs in normalised units back to original target units.
    """

    x_mean: torch.Tensor  # [D]
    x_std: torch.Tensor  # [D]
    y_mean: float
    y_std: float

    def __post_init__(self) -> None:
        x_mean = torch.as_tensor(np.asarray(self.x_mean, dtype=np.float64))
        x_std = torch.as_tensor(np.asarray(self.x_std, dtype=np.float64))
        if x_mean.ndim != 1 or x_std.shape != x_mean.shape:
            raise ValueError(
                f"Standardizer: x_mean and x_std must both be [D]; got shapes "
                f"{tuple(x_mean.shape)} and {tuple(x_std.shape)}"
            )
        if not (torch.isfinite(x_mean).all() and torch.isfinite(x_std).all()):
            raise ValueError("Standardizer: x_mean/x_std contain non-finite values")
        if (x_std <= 0).any():
            raise ValueError(f"Standardizer: x_std must be > 0, got {x_std.tolist()}")
        y_mean, y_std = float(self.y_mean), float(self.y_std)
        if not (np.isfinite(y_mean) and np.isfinite(y_std) and y_std > 0):
            raise ValueError(
                f"Standardizer: need finite y_mean and y_std > 0, got {y_mean}, {y_std}"
            )
        object.__setattr__(self, "x_mean", x_mean)
        object.__setattr__(self, "x_std", x_std)
        object.__setattr__(self, "y_mean", y_mean)
        object.__setattr__(self, "y_std", y_std)

    @classmethod
    def fit(cls, x: ArrayLike, y: ArrayLike) -> Standardizer:
        """Fit on inputs ``x [N, D]`` and targets ``y [N]`` (float64, population std, 0 -> 1)."""
        xa = np.asarray(x, dtype=np.float64)
        ya = np.asarray(y, dtype=np.float64).reshape(-1)
        if xa.ndim != 2 or xa.shape[0] != ya.shape[0] or xa.shape[0] == 0:
            raise ValueError(
                f"Standardizer.fit needs x [N, D] and y [N] with N >= 1; got {xa.shape}, {ya.shape}"
            )
        x_std = xa.std(axis=0)
        x_std[x_std == 0] = 1.0
        y_std = float(ya.std())
        return cls(xa.mean(axis=0), x_std, float(ya.mean()), y_std if y_std > 0 else 1.0)

    @property
    def n_features(self) -> int:
        return int(self.x_mean.shape[0])

    def _stats(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.shape[-1:] != (self.n_features,):
            raise ValueError(
                f"Standardizer expects inputs [..., {self.n_features}], got {tuple(x.shape)}"
            )
        return self.x_mean.to(x.device, x.dtype), self.x_std.to(x.device, x.dtype)

    def transform_x(self, x: ArrayLike) -> torch.Tensor:
        """``x [..., D]`` in original units -> normalised (same float dtype; float32 otherwise)."""
        x = _as_float_tensor(x)
        mean, std = self._stats(x)
        return (x - mean) / std

    def inverse_x(self, x: ArrayLike) -> torch.Tensor:
        """Normalised ``x [..., D]`` -> original units."""
        x = _as_float_tensor(x)
        mean, std = self._stats(x)
        return x * std + mean

    def transform_y(self, y: ArrayLike) -> torch.Tensor:
        """Targets (any shape) in original units -> normalised."""
        return (_as_float_tensor(y) - self.y_mean) / self.y_std

    def inverse_y(self, mean: ArrayLike) -> torch.Tensor:
        """Predicted means (any shape, e.g. ``[T, N]``) -> original target units."""
        return _as_float_tensor(mean) * self.y_std + self.y_mean

    def inverse_std(self, std: ArrayLike) -> torch.Tensor:
        """Predictive standard deviations -> original target units (scale only)."""
        return _as_float_tensor(std) * self.y_std

    def inverse_var(self, var: ArrayLike) -> torch.Tensor:
        """Predictive variances -> original target units (times ``y_std**2``)."""
        return _as_float_tensor(var) * self.y_std**2

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly: ``{"x_mean": [..], "x_std": [..], "y_mean": f, "y_std": f}``."""
        return {
            "x_mean": self.x_mean.tolist(),
            "x_std": self.x_std.tolist(),
            "y_mean": self.y_mean,
            "y_std": self.y_std,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Standardizer:
        """Inverse of ``to_dict``."""
        missing = {"x_mean", "x_std", "y_mean", "y_std"} - set(d)
        if missing:
            raise ValueError(f"Standardizer.from_dict: missing keys {sorted(missing)}")
        return cls(d["x_mean"], d["x_std"], d["y_mean"], d["y_std"])


def _as_float_tensor(a: ArrayLike) -> torch.Tensor:
    t = torch.as_tensor(a)
    return t if t.is_floating_point() else t.to(torch.float32)
