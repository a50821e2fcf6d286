"""Regression scores of MC samples against their constant-uncertainty baseline (Teye et al.)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from bayesify import metrics
from bayesify.posthoc.noise import fit_noise_variance
from bayesify.predictive import Predictive


@dataclass(frozen=True)
class NoiseFit:
    """Noise variance τ⁻¹ of the MC predictive and constant variance of the baseline, each
    fitted on validation data separately for PLL and for CRPS (each metric gets its own τ)."""

    noise_pll: float
    noise_crps: float
    constant_pll: float
    constant_crps: float

    @classmethod
    def fit(cls, val_pred: Predictive, y_val: Tensor) -> NoiseFit:
        """Fit all four on a validation predictive (samples ``[T, N]``) and targets ``[N]``."""
        s, m = val_pred.samples, val_pred.mean
        return cls(
            noise_pll=fit_noise_variance(s, y_val, "pll"),
            noise_crps=fit_noise_variance(s, y_val, "crps"),
            constant_pll=metrics.fit_constant_std(m, y_val, "pll") ** 2,
            constant_crps=metrics.fit_constant_std(m, y_val, "crps") ** 2,
        )


def regression_scores(
    pred: Predictive, y: Tensor, fit: NoiseFit, *, loc: float = 0.0, scale: float = 1.0
) -> dict[str, dict[str, float]]:
    """Scores of the MC predictive and of its constant-uncertainty baseline on ``y [N]``.

    ``pred`` and ``fit`` are in model units; ``loc``/``scale`` map them to the units of ``y``
    (original target units). PLL is the mixture log-likelihood over samples; CRPS is scored on
    the moment-matched Gaussian, as in Teye et al. Normalised scores (×100) put the constant
    baseline (same mean) at 0 and the per-point optimal variance at 100.
    Returns ``{"MC": {...}, "CU": {...}}`` with rmse, pll, crps, pll_norm, crps_norm, mean_std.
    """

    def units(p: Predictive) -> Predictive:
        return p.affine(loc, scale)

    mc_pll, mc_crps = units(pred.with_noise(fit.noise_pll)), units(pred.with_noise(fit.noise_crps))
    cu_pll = units(pred.constant_uncertainty(fit.constant_pll))
    cu_crps = units(pred.constant_uncertainty(fit.constant_crps))
    mean = mc_pll.mean
    opt_pll = metrics.optimal_pll(mean, y).item()
    opt_crps = metrics.optimal_crps(mean, y).item()
    base_pll = cu_pll.log_prob(y).mean().item()
    base_crps = cu_crps.crps(y, form="gaussian").mean().item()
    out = {}
    for name, (p_pll, p_crps) in {"MC": (mc_pll, mc_crps), "CU": (cu_pll, cu_crps)}.items():
        pll = p_pll.log_prob(y).mean().item()
        crps = p_crps.crps(y, form="gaussian").mean().item()
        out[name] = {
            "rmse": metrics.rmse(mean, y).item(),
            "pll": pll,
            "crps": crps,
            "pll_norm": metrics.normalized_pll(pll, base_pll, opt_pll),
            "crps_norm": metrics.normalized_crps(crps, base_crps, opt_crps),
            "mean_std": p_crps.std.mean().item(),
        }
    return out
