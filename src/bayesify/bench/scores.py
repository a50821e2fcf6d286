"""Regression scores of MC samples against their constant-uncertainty baseline (Teye et al.)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from bayesify import metrics
from bayesify.options import NoiseProtocol
from bayesify.posthoc.noise import (
    fit_noise_variance,
    teye_tau_range,
    variance_bounds,
)
from bayesify.predictive import Predictive


@dataclass(frozen=True)
class NoiseFit:
    """Noise variance τ⁻¹ of the MC predictive and constant variance of the baseline (CUBN /
    CUDO) used for PLL and for CRPS, fitted on validation data under ``protocol``:

    * ``"teye"`` (Teye et al.): one τ⁻¹ and one constant variance, both chosen by CRPS inside the
      authors' per-dataset τ range, so ``noise_pll == noise_crps`` and
      ``constant_pll == constant_crps``;
    * ``"bayesify"``: each metric its own τ⁻¹ and constant (σ² = MSE for PLL), wide range.

    See :mod:`bayesify.posthoc.noise`.
    """

    noise_pll: float
    noise_crps: float
    constant_pll: float
    constant_crps: float
    protocol: str = NoiseProtocol.BAYESIFY.value

    @classmethod
    def fit(
        cls,
        val_pred: Predictive,
        y_val: Tensor,
        *,
        protocol: NoiseProtocol | str = NoiseProtocol.BAYESIFY,
        dataset: str | None = None,
        tau_range: tuple[float, float] | None = None,
        y_scale: float = 1.0,
    ) -> NoiseFit:
        """Fit on a validation predictive (samples ``[T, N]``) and targets ``[N]`` (model units).

        ``dataset`` picks Teye's τ range (``protocol="teye"``); ``tau_range`` overrides it. The
        ranges are in original target units: ``y_scale`` is the standard deviation the targets
        were divided by (1 when the model predicts in original units).
        """
        try:
            protocol = NoiseProtocol(protocol)
        except ValueError:
            valid = ", ".join(p.value for p in NoiseProtocol)
            raise ValueError(f"unknown noise protocol {protocol!r}; valid: {valid}") from None
        s, m = val_pred.samples, val_pred.mean
        if protocol is NoiseProtocol.TEYE:
            bounds = variance_bounds(tau_range or teye_tau_range(dataset), y_scale)
            noise = fit_noise_variance(s, y_val, "crps", bounds=bounds)
            const = metrics.fit_constant_std(m, y_val, "crps", bounds=bounds) ** 2
            return cls(noise, noise, const, const, protocol.value)
        return cls(
            noise_pll=fit_noise_variance(s, y_val, "pll"),
            noise_crps=fit_noise_variance(s, y_val, "crps"),
            constant_pll=metrics.fit_constant_std(m, y_val, "pll") ** 2,
            constant_crps=metrics.fit_constant_std(m, y_val, "crps") ** 2,
            protocol=protocol.value,
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
