"""Regression metrics: log likelihood and CRPS of Gaussians, Gaussian mixtures and samples.

Shapes: targets ``y [N]``; a predictive mean ``[N]``; Monte Carlo sample means ``[T, N]`` (sample
axis first). A scale parameter (``var`` / ``std``) may be a scalar, ``[N]`` or, for mixtures,
``[T, N]``. Computation is done in float64; results come back in the inputs' float dtype.

The Teye et al. (2018, §4.2) baselines (constant-uncertainty fit, per-point optimum and the
normalised scores) live in :mod:`bayesify.metrics.regression_baselines`; calibration curves and
interval coverage in :mod:`bayesify.metrics.regression_calibration`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from bayesify.metrics._validate import (
    as_float,
    check_ndim,
    check_nonempty,
    check_positive,
    check_same_shape,
    expand_param,
    out_dtype,
    reduce,
)

__all__ = [
    "crps_gaussian",
    "crps_mixture",
    "crps_samples",
    "gaussian_log_prob",
    "mixture_log_prob",
    "rmse",
]

_LOG_2PI = math.log(2.0 * math.pi)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
# Elements of the [T(T-1)/2, n] pairwise tensor built per chunk in crps_mixture (32 MB float64).
_PAIR_BUDGET = 1 << 22


def _point_inputs(mean: Any, y: Any, mean_name: str = "mean") -> tuple[Tensor, Tensor]:
    """``mean [N]`` and ``y [N]`` as checked float tensors."""
    m = as_float(mean, mean_name)
    t = as_float(y, "y").to(m.device)
    check_ndim(m, 1, mean_name, "[N]")
    check_ndim(t, 1, "y", "[N]")
    check_same_shape(m, t, mean_name, "y")
    check_nonempty(t, "y")
    return m, t


def _sample_inputs(means: Any, y: Any, name: str = "means") -> tuple[Tensor, Tensor]:
    """``means [T, N]`` and ``y [N]`` as checked float tensors."""
    m = as_float(means, name)
    t = as_float(y, "y").to(m.device)
    check_ndim(m, 2, name, "[T, N]")
    check_ndim(t, 1, "y", "[N]")
    if m.shape[1] != t.shape[0]:
        raise ValueError(
            f"{name} [T, N] and y [N] disagree on N: {name} has shape {tuple(m.shape)}, "
            f"y has shape {tuple(t.shape)}"
        )
    check_nonempty(m, name)
    return m, t


def _scale(
    p: Any, name: str, like: Tensor, allowed: str, allow_zero: bool
) -> tuple[Tensor, Tensor]:
    """Checked scale parameter broadcast to ``like``'s shape, and as given (for ``out_dtype``)."""
    s = as_float(p, name).to(like.device)
    check_positive(s, name, allow_zero=allow_zero)
    return expand_param(s, like.shape, name, allowed), s


def _phi(z: Tensor) -> Tensor:
    """Standard normal density."""
    return torch.exp(-0.5 * z * z) * _INV_SQRT_2PI


def _two_cdf_minus_one(z: Tensor) -> Tensor:
    """``2 Phi(z) - 1`` via erf (several times faster than ``torch.special.ndtr`` on CPU)."""
    return torch.special.erf(z * _INV_SQRT_2)


def _std_abs_mean_(z: Tensor) -> Tensor:
    """E|N(z, 1)| = ``2 phi(z) + z (2 Phi(z) - 1)``, overwriting ``z`` to save memory traffic."""
    out = torch.special.erf(z * _INV_SQRT_2).mul_(z)
    return out.add_(z.square_().mul_(-0.5).exp_(), alpha=2.0 * _INV_SQRT_2PI)


def _gauss_abs_mean(m: Tensor, s: Tensor) -> Tensor:
    """E|Z| for Z ~ N(m, s^2): ``2 s phi(m/s) + m (2 Phi(m/s) - 1)``; ``|m|`` where ``s == 0``."""
    pos = s > 0
    if bool(pos.all()):
        z = m / s
        return 2.0 * s * _phi(z) + m * _two_cdf_minus_one(z)
    s_safe = torch.where(pos, s, torch.ones_like(s))
    z = m / s_safe
    val = 2.0 * s_safe * _phi(z) + m * _two_cdf_minus_one(z)
    return torch.where(pos, val, m.abs())


def rmse(mean: Any, y: Any) -> Tensor:
    """Root mean squared error of a point prediction ``mean [N]`` against ``y [N]`` (0-dim)."""
    m, t = _point_inputs(mean, y)
    dtype = out_dtype(m, t)
    err = m.to(torch.float64) - t.to(torch.float64)
    return err.square().mean().sqrt().to(dtype)


def gaussian_log_prob(mean: Any, var: Any, y: Any, *, reduction: str = "mean") -> Tensor:
    """Gaussian log density ``log N(y; mean, var)`` per point.

    Args:
        mean: predictive mean ``[N]``.
        var: predictive variance, a scalar or ``[N]``, > 0.
        y: targets ``[N]``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (``[N]``).
    """
    m, t = _point_inputs(mean, y)
    v, v_raw = _scale(var, "var", t, "a scalar or [N]", allow_zero=False)
    dtype = out_dtype(m, t, v_raw)
    m, t, v = (x.to(torch.float64) for x in (m, t, v))
    lp = -0.5 * (_LOG_2PI + torch.log(v) + (t - m).square() / v)  # [N]
    return reduce(lp, reduction, dtype)


def mixture_log_prob(means: Any, var: Any, y: Any, *, reduction: str = "mean") -> Tensor:
    """Log density of the equal-weight Gaussian mixture over T samples (predictive log likelihood).

    ``log (1/T) sum_t N(y; means[t], var[t])`` computed as a logsumexp over the sample axis — the
    PLL of Gal & Ghahramani (2016) and Teye et al. (2018).

    Args:
        means: per-sample predictive means ``[T, N]``.
        var: per-sample variance (e.g. aleatoric noise), a scalar, ``[N]`` or ``[T, N]``, > 0.
        y: targets ``[N]``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (``[N]``).
    """
    m, t = _sample_inputs(means, y)
    v, v_raw = _scale(var, "var", m, "a scalar, [N] or [T, N]", allow_zero=False)
    dtype = out_dtype(m, t, v_raw)
    m, t, v = (x.to(torch.float64) for x in (m, t, v))
    lp = -0.5 * (_LOG_2PI + torch.log(v) + (t - m).square() / v)  # [T, N]
    lp = torch.logsumexp(lp, dim=0) - math.log(m.shape[0])  # [N]
    return reduce(lp, reduction, dtype)


def crps_gaussian(mean: Any, std: Any, y: Any, *, reduction: str = "mean") -> Tensor:
    """CRPS of a Gaussian forecast, closed form (Gneiting & Raftery 2007).

    ``CRPS = std * [z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi)]`` with ``z = (y - mean) / std``.

    Args:
        mean: predictive mean ``[N]``.
        std: predictive standard deviation, a scalar or ``[N]``, > 0.
        y: targets ``[N]``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (``[N]``).
    """
    m, t = _point_inputs(mean, y)
    s, s_raw = _scale(std, "std", t, "a scalar or [N]", allow_zero=False)
    dtype = out_dtype(m, t, s_raw)
    m, t, s = (x.to(torch.float64) for x in (m, t, s))
    z = (t - m) / s
    crps = s * (z * _two_cdf_minus_one(z) + 2.0 * _phi(z) - _INV_SQRT_PI)  # [N]
    return reduce(crps, reduction, dtype)


def crps_mixture(means: Any, std: Any, y: Any, *, reduction: str = "mean") -> Tensor:
    """Exact CRPS of the equal-weight Gaussian mixture over T samples.

    Uses the closed form of Grimit et al. (2006): ``CRPS = E|X - y| - 1/2 E|X - X'|`` with, for a
    mixture, ``E|X - y| = mean_t A(mu_t - y, s_t^2)`` and
    ``E|X - X'| = mean_{t,t'} A(mu_t - mu_t', s_t^2 + s_t'^2)``, where
    ``A(m, v) = E|N(m, v)| = 2 sqrt(v) phi(m/sqrt(v)) + m (2 Phi(m/sqrt(v)) - 1)``.

    Where ``std == 0`` the component is a point mass and ``A`` becomes ``|m|``; with ``std = 0``
    everywhere this is exactly the sample (energy) CRPS, and :func:`crps_samples` is used.
    The pairwise term costs O(T^2 N) (T(T-1)/2 distinct pairs per point); it is evaluated in
    chunks over N to bound memory.

    Args:
        means: per-sample predictive means ``[T, N]``.
        std: per-component standard deviation, a scalar, ``[N]`` or ``[T, N]``, >= 0.
        y: targets ``[N]``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (``[N]``).
    """
    m, t = _sample_inputs(means, y)
    s, s_raw = _scale(std, "std", m, "a scalar, [N] or [T, N]", allow_zero=True)
    dtype = out_dtype(m, t, s_raw)
    if not bool((s > 0).any()):  # all point masses: the O(T log T) sample formula is exact
        return crps_samples(m.to(dtype), t.to(dtype), reduction=reduction)
    m, t, s = (x.to(torch.float64) for x in (m, t, s))
    n_samples, n = m.shape
    same_std = bool((s == s[:1]).all())  # scalar or [N] std: one pair scale per point
    i, j = torch.triu_indices(n_samples, n_samples, offset=1, device=m.device)  # [P], P = T(T-1)/2
    chunk = max(1, _PAIR_BUDGET // max(1, i.numel()))
    out = torch.empty(n, dtype=torch.float64, device=m.device)
    for lo in range(0, n, chunk):
        mc, sc, tc = m[:, lo : lo + chunk], s[:, lo : lo + chunk], t[lo : lo + chunk]
        to_obs = _gauss_abs_mean(mc - tc, sc).mean(0)  # [n]
        # E|X - X'| = (2 sum_{t<t'} A_tt' + sum_t A_tt) / T^2, A_tt = A(0, 2 s_t^2) = 2 s_t/sqrt(pi)
        diff = mc[i] - mc[j]  # [P, n]
        var = sc.square()  # [T, n]
        if not bool((sc > 0).all()):  # some point masses: the slower masked form
            off_diag = _gauss_abs_mean(diff, (var[i] + var[j]).sqrt_()).sum(0)  # [n]
        elif same_std:
            pair_std = math.sqrt(2.0) * sc[0]  # [n]
            off_diag = _std_abs_mean_(diff.div_(pair_std)).sum(0) * pair_std  # [n]
        else:
            pair_std = (var[i] + var[j]).sqrt_()  # [P, n]
            off_diag = (_std_abs_mean_(diff.div_(pair_std)) * pair_std).sum(0)  # [n]
        diag = 2.0 * _INV_SQRT_PI * sc.sum(0)  # [n]
        out[lo : lo + chunk] = to_obs - 0.5 * (2.0 * off_diag + diag) / n_samples**2
    return reduce(out, reduction, dtype)


def crps_samples(samples: Any, y: Any, *, reduction: str = "mean") -> Tensor:
    """Empirical CRPS of T samples: ``mean_t |x_t - y| - 1/2 mean_{t,t'} |x_t - x_t'|``.

    The pairwise term uses the sorted-samples identity
    ``sum_{t,t'} |x_t - x_t'| = 2 sum_i (2i - T - 1) x_(i)`` (O(T log T) per point). This is the
    plain (not "fair") ensemble CRPS, as in ``properscoring.crps_ensemble``.

    Args:
        samples: forecast samples ``[T, N]``.
        y: targets ``[N]``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (``[N]``).
    """
    x, t = _sample_inputs(samples, y, name="samples")
    dtype = out_dtype(x, t)
    x, t = x.to(torch.float64), t.to(torch.float64)
    n_samples = x.shape[0]
    to_obs = (x - t).abs().mean(0)  # [N]
    x_sorted = torch.sort(x, dim=0).values  # [T, N]
    i = torch.arange(1, n_samples + 1, dtype=torch.float64, device=x.device)
    weights = (2.0 * i - n_samples - 1.0)[:, None]  # [T, 1]
    half_between = (weights * x_sorted).sum(0) / n_samples**2  # [N] = 1/2 E|X - X'|
    return reduce(to_obs - half_between, reduction, dtype)
