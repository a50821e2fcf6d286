"""Distances between two predictive distributions per input: how far an approximation's
predictive is from a reference posterior's (HMC), as in Izmailov et al. 2021.

* :func:`wasserstein_1d`: the p-Wasserstein distance between two 1-D distributions given by
  samples ``[M, N]`` and ``[K, N]`` (one column per input), exact for the empirical
  distributions through their quantile functions: ``W_p^p = ∫₀¹ |F⁻¹(u) - G⁻¹(u)|^p du``.
  ``p=2`` is the distance for regression predictives (mixtures, compared by samples); ``p=1``
  equals ``scipy.stats.wasserstein_distance``.
* :func:`total_variation`: ``½ Σ_c |p_c - q_c|`` between class probabilities ``[N, C]``.
* :func:`argmax_agreement`: the fraction of inputs whose most probable class is the same.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["argmax_agreement", "rank_correlation", "total_variation", "wasserstein_1d"]


def _quantile_at(sorted_samples: Tensor, u: Tensor) -> Tensor:
    """The empirical quantile function of each column of ``sorted_samples [M, N]`` at
    ``u [G]`` in (0, 1): ``[G, N]``."""
    m = sorted_samples.shape[0]
    index = (u * m).floor().long().clamp(0, m - 1)
    return sorted_samples[index]


def wasserstein_1d(a: Tensor, b: Tensor, p: float = 2.0) -> Tensor:
    """W_p between the empirical distributions of the columns of ``a [M, N]`` and ``b [K, N]``
    (sample axis first): ``[N]``, in float64. ``a [M]`` / ``b [K]`` give a scalar."""
    if p < 1:
        raise ValueError(f"p must be >= 1, got {p}")
    vector = a.dim() == 1
    a2, b2 = (a[:, None], b[:, None]) if vector else (a, b)
    if a2.dim() != 2 or b2.dim() != 2 or a2.shape[1] != b2.shape[1]:
        raise ValueError(
            f"samples must be [M, N] and [K, N], got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    if a2.shape[0] == 0 or b2.shape[0] == 0:
        raise ValueError("wasserstein_1d needs at least one sample of each distribution")
    sa, sb = a2.double().sort(0).values, b2.double().sort(0).values
    m, k = sa.shape[0], sb.shape[0]
    # both quantile functions are constant between consecutive breakpoints i/M and j/K
    edges = torch.cat([torch.arange(m + 1, dtype=torch.float64) / m,
                       torch.arange(k + 1, dtype=torch.float64) / k]).unique()  # fmt: skip
    widths = edges[1:] - edges[:-1]  # [G]
    mids = (edges[1:] + edges[:-1]) / 2
    diff = (_quantile_at(sa, mids) - _quantile_at(sb, mids)).abs().pow(p)  # [G, N]
    out = (widths[:, None] * diff).sum(0).pow(1.0 / p)
    return out[0] if vector else out


def total_variation(p: Tensor, q: Tensor) -> Tensor:
    """Total variation ``½ Σ_c |p_c - q_c|`` between class probabilities ``[N, C]``: ``[N]``."""
    if p.shape != q.shape or p.dim() != 2:
        raise ValueError(f"expected two [N, C] tensors, got {tuple(p.shape)} and {tuple(q.shape)}")
    return 0.5 * (p.double() - q.double()).abs().sum(-1)


def argmax_agreement(p: Tensor, q: Tensor) -> float:
    """The fraction of rows of ``p [N, C]`` and ``q [N, C]`` with the same most probable class."""
    if p.shape != q.shape or p.dim() != 2:
        raise ValueError(f"expected two [N, C] tensors, got {tuple(p.shape)} and {tuple(q.shape)}")
    return float((p.argmax(-1) == q.argmax(-1)).double().mean())


def _average_ranks(x: Tensor) -> Tensor:
    """1-based ranks of ``x [N]``, ties given their mean rank (float64)."""
    _, inverse, counts = torch.unique(x.double(), sorted=True, return_inverse=True,
                                      return_counts=True)  # fmt: skip
    ends = torch.cumsum(counts, 0).double()
    return (ends - (counts.double() - 1) / 2)[inverse]


def rank_correlation(a: Tensor, b: Tensor) -> float:
    """Spearman's rank correlation of two scores ``a [N]`` and ``b [N]`` (average ranks for
    ties; 0 when either is constant)."""
    if a.shape != b.shape or a.dim() != 1 or len(a) < 2:
        raise ValueError(f"expected two [N] tensors, N >= 2, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")  # fmt: skip
    ra, rb = _average_ranks(a), _average_ranks(b.to(a.device))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = (ra.square().sum() * rb.square().sum()).sqrt()
    return float((ra * rb).sum() / den) if den > 0 else 0.0
