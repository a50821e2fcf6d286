"""Post-hoc recalibration fitted on validation data: temperature and variance scaling.

* Temperature scaling (Guo et al. 2017): logits ``z / T`` with one T > 0 minimising the
  validation NLL. For MC predictives the per-sample log-probabilities are scaled (``log p / T``,
  renormalised), i.e. the logits up to a per-sample constant, so it applies to any
  classification :class:`~bayesify.predictive.Predictive`.
* Variance (τ) scaling for regression (Kuleshov et al. 2018 style, one scalar): every sample
  mean's deviation from the predictive mean is scaled by s and the noise variance by s², so the
  total variance is scaled by s²; s > 0 minimises the validation NLL of the mixture.

Each ``fit_*`` returns the fitted scale; each ``apply_*`` returns a transformed Predictive.
Optimisation is one-dimensional over the log scale with ``scipy.optimize.minimize_scalar``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bayesify.predictive import Predictive, Task

_LOG_BOUNDS = (math.log(1e-2), math.log(1e2))


def _check_task(pred: Predictive, task: Task, what: str) -> None:
    if not isinstance(pred, Predictive):
        raise TypeError(f"{what} takes a Predictive, got {type(pred).__name__}")
    if pred.task is not task:
        raise ValueError(f"{what} needs a {task.value} predictive, got {pred.task.value}")


def _minimise_log_scale(loss, bounds: tuple[float, float] = _LOG_BOUNDS) -> float:
    from scipy.optimize import minimize_scalar  # on first use: serving never imports scipy

    res = minimize_scalar(loss, bounds=bounds, method="bounded", options={"xatol": 1e-5})
    if not res.success:
        raise RuntimeError(f"scale fit did not converge: {res.message}")
    return math.exp(res.x)


# ---------------------------------------------------------------------- classification
def _tempered(log_probs: Tensor, temperature: float) -> Tensor:
    """Per-sample log-probabilities ``[T, N, C]`` at temperature -> mean probabilities."""
    return torch.softmax(log_probs / temperature, dim=-1)


def fit_temperature(val: Predictive | Tensor, labels: Tensor) -> float:
    """Temperature T > 0 minimising the validation NLL of the mean of softmax(logits / T).

    ``val``: a classification Predictive (samples ``[T, N, C]``) or logits ``[N, C]`` /
    ``[T, N, C]``; ``labels``: ``[N]``. Searched in [0.01, 100].
    """
    log_probs = _as_log_probs(val)  # [T, N, C] float64
    y = torch.as_tensor(labels).long().reshape(-1)
    if y.shape[0] != log_probs.shape[1]:
        raise ValueError(f"labels must be [N] = [{log_probs.shape[1]}], got {tuple(y.shape)}")

    def nll(log_t: float) -> float:
        p = _tempered(log_probs, math.exp(log_t)).mean(0)  # [N, C]
        picked = p.gather(1, y.view(-1, 1)).clamp_min(1e-300)
        return -float(picked.log().mean())

    return _minimise_log_scale(nll)


def apply_temperature(pred: Predictive | Tensor, temperature: float) -> Predictive:
    """The classification Predictive at ``temperature`` (from a Predictive or logits)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    log_probs = _as_log_probs(pred)
    return Predictive.classification(_tempered(log_probs, temperature).float())


def temperature_scale(
    val: Predictive | Tensor, labels: Tensor, test: Predictive | Tensor | None = None
) -> tuple[float, Predictive]:
    """Fit T on ``(val, labels)``; return T and the scaled ``test`` (or ``val``) Predictive."""
    t = fit_temperature(val, labels)
    return t, apply_temperature(val if test is None else test, t)


def _as_log_probs(x: Predictive | Tensor) -> Tensor:
    if isinstance(x, Predictive):
        _check_task(x, Task.CLASSIFICATION, "temperature scaling")
        return x.samples.double().clamp_min(1e-300).log()
    logits = torch.as_tensor(x).double()
    if logits.dim() == 2:
        logits = logits.unsqueeze(0)
    if logits.dim() != 3:
        raise ValueError(f"logits must be [N, C] or [T, N, C], got {tuple(logits.shape)}")
    if not torch.isfinite(logits).all():
        raise ValueError("logits contain non-finite values")
    return torch.log_softmax(logits, dim=-1)


# ---------------------------------------------------------------------- regression
def apply_variance_scale(pred: Predictive, scale: float) -> Predictive:
    """Regression Predictive with total variance scaled by ``scale`` (s²): sample deviations
    from the mean times s, noise variance times s²; the mean is unchanged."""
    _check_task(pred, Task.REGRESSION, "variance scaling")
    if scale <= 0:
        raise ValueError(f"variance scale must be > 0, got {scale}")
    s = math.sqrt(scale)
    mean = pred.mean.unsqueeze(0)  # [1, N]
    samples = mean + (pred.samples - mean) * s
    return Predictive.regression(samples, pred.noise_variance * scale)


def fit_variance_scale(val: Predictive, y: Tensor) -> float:
    """Variance scale s² > 0 minimising the validation NLL of the scaled mixture."""
    _check_task(val, Task.REGRESSION, "variance scaling")
    y = torch.as_tensor(y, dtype=val.samples.dtype).reshape(-1)
    if (val.noise_variance <= 0).any() and float(val.epistemic_variance.min()) <= 0:
        raise ValueError("variance scaling needs a predictive with positive variance")
    val64 = Predictive.regression(val.samples.double(), val.noise_variance.double())

    def nll(log_s: float) -> float:
        return -float(apply_variance_scale(val64, math.exp(log_s)).log_prob(y.double()).mean())

    return _minimise_log_scale(nll, (math.log(1e-4), math.log(1e4)))


def variance_scale(
    val: Predictive, y: Tensor, test: Predictive | None = None
) -> tuple[float, Predictive]:
    """Fit the variance scale on ``(val, y)``; return it and the scaled ``test`` (or ``val``)."""
    s = fit_variance_scale(val, y)
    return s, apply_variance_scale(val if test is None else test, s)
