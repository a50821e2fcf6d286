"""Small 1-D regression sets for figures and quick tests (float32 tensors, seeded).

* ``toy_cubic``: y = x^3 + eps, eps ~ N(0, 3^2), x ~ U[-4, 4] (Hernández-Lobato & Adams 2015;
  Trinh et al. Fig. 1 style).
* ``toy_teye``: y = x sin(x) + eps, eps ~ N(0, 0.3^2) (homoscedastic), x uniform on two
  clusters [-5, -1] and [1, 5], so the gap (-1, 1) and the outside should show growing
  epistemic uncertainty (in the style of Teye et al. 2018, Fig. 1).
"""

from __future__ import annotations

import numpy as np
import torch

from bayesify.options import shown

__all__ = ["toy_cubic", "toy_grid", "toy_teye", "toy_teye_function"]


def _check(n: int, noise_std: float, lo: float, hi: float, what: str) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{what}: n must be an int >= 1, got {shown(n)}")
    if not noise_std >= 0:
        raise ValueError(f"{what}: noise_std must be >= 0, got {shown(noise_std)}")
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"{what}: need finite lo < hi, got ({lo}, {hi})")


def _pack(x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    xt = torch.from_numpy(x.astype(np.float32)).unsqueeze(1)  # [N, 1]
    return xt, torch.from_numpy(y.astype(np.float32))  # [N]


def toy_cubic(
    n: int = 30,
    *,
    seed: int = 0,
    noise_std: float = 3.0,
    x_range: tuple[float, float] = (-4.0, 4.0),
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points of y = x^3 + N(0, noise_std^2), x ~ U(x_range). Returns ``x [N, 1], y [N]``."""
    lo, hi = x_range
    _check(n, noise_std, lo, hi, "toy_cubic")
    rng = np.random.default_rng(seed)
    x = rng.uniform(lo, hi, size=n)
    y = x**3 + noise_std * rng.standard_normal(n)
    return _pack(x, y)


def toy_teye_function(x: torch.Tensor) -> torch.Tensor:
    """The noise-free ``toy_teye`` curve f(x) = x sin(x), elementwise (any shape)."""
    return x * torch.sin(x)


def toy_teye(
    n: int = 100,
    *,
    seed: int = 0,
    noise_std: float = 0.3,
    x_range: tuple[float, float] = (-5.0, 5.0),
    gap: tuple[float, float] = (-1.0, 1.0),
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points of y = x sin(x) + N(0, noise_std^2) with no inputs inside ``gap``.

    The first ``n // 2`` inputs are U[x_range[0], gap[0]], the rest U[gap[1], x_range[1]].
    Returns ``x [N, 1], y [N]``.
    """
    lo, hi = x_range
    _check(n, noise_std, lo, hi, "toy_teye")
    if not lo < gap[0] < gap[1] < hi:
        raise ValueError(f"toy_teye: need x_range[0] < gap[0] < gap[1] < x_range[1], got {gap}")
    rng = np.random.default_rng(seed)
    n_left = n // 2
    x = np.concatenate(
        [rng.uniform(lo, gap[0], size=n_left), rng.uniform(gap[1], hi, size=n - n_left)]
    )
    y = x * np.sin(x) + noise_std * rng.standard_normal(n)
    return _pack(x, y)


def toy_grid(x_min: float, x_max: float, n: int = 200) -> torch.Tensor:
    """``n`` evenly spaced inputs from ``x_min`` to ``x_max`` (inclusive), ``[n, 1]`` float32."""
    _check(n, 0.0, x_min, x_max, "toy_grid")
    return torch.linspace(x_min, x_max, n, dtype=torch.float32).unsqueeze(1)
