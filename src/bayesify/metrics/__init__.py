"""Pure metric functions on tensors (sample axis first): the bottom layer of bayesify.

Families: :mod:`~bayesify.metrics.regression` (log likelihood, CRPS),
:mod:`~bayesify.metrics.regression_baselines` (Teye et al. normalised scores),
:mod:`~bayesify.metrics.regression_calibration` (interval coverage),
:mod:`~bayesify.metrics.classification`, :mod:`~bayesify.metrics.ood`,
:mod:`~bayesify.metrics.posterior` (distances to a reference posterior) and
:mod:`~bayesify.metrics.selective`.
"""

from bayesify.metrics._validate import Reduction
from bayesify.metrics.classification import (
    PROB_FLOOR,
    ReliabilityCurve,
    brier_score,
    calibration_error_of_curve,
    entropy,
    error_rate,
    expected_calibration_error,
    expected_entropy,
    mutual_information,
    nll,
    reliability_curve,
)
from bayesify.metrics.ood import OODPositive, aupr, auroc, fpr_at_tpr
from bayesify.metrics.posterior import (
    argmax_agreement,
    rank_correlation,
    total_variation,
    wasserstein_1d,
)
from bayesify.metrics.regression import (
    crps_gaussian,
    crps_mixture,
    crps_samples,
    gaussian_log_prob,
    mixture_log_prob,
    rmse,
)
from bayesify.metrics.regression_baselines import (
    ERROR_FLOOR,
    OPTIMAL_CRPS_FACTOR,
    ConstantStdObjective,
    fit_constant_std,
    normalized_crps,
    normalized_pll,
    optimal_crps,
    optimal_pll,
)
from bayesify.metrics.regression_calibration import (
    RegressionCalibrationCurve,
    interval_coverage,
    miscalibration_area,
    regression_calibration_curve,
)
from bayesify.metrics.selective import RiskCoverageCurve, aurc, risk_coverage_curve

__all__ = [
    "ERROR_FLOOR",
    "OPTIMAL_CRPS_FACTOR",
    "PROB_FLOOR",
    "ConstantStdObjective",
    "OODPositive",
    "Reduction",
    "RegressionCalibrationCurve",
    "ReliabilityCurve",
    "RiskCoverageCurve",
    "argmax_agreement",
    "aupr",
    "auroc",
    "aurc",
    "brier_score",
    "calibration_error_of_curve",
    "crps_gaussian",
    "crps_mixture",
    "crps_samples",
    "entropy",
    "error_rate",
    "expected_calibration_error",
    "expected_entropy",
    "fit_constant_std",
    "fpr_at_tpr",
    "gaussian_log_prob",
    "interval_coverage",
    "miscalibration_area",
    "mixture_log_prob",
    "mutual_information",
    "nll",
    "normalized_crps",
    "normalized_pll",
    "optimal_crps",
    "optimal_pll",
    "rank_correlation",
    "regression_calibration_curve",
    "reliability_curve",
    "risk_coverage_curve",
    "rmse",
    "total_variation",
    "wasserstein_1d",
]
