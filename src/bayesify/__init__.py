"""bayesify: turn ordinary PyTorch networks into approximate Bayesian ones and measure how good
their uncertainty is.

    method = bayesify.MCBN(net)
    method.fit((X, y), val=(Xv, yv), epochs=100, batch_size=32)
    pred = method.predict(x, samples=50)      # Predictive, samples [T, N] or [T, N, C]
    pred.mean, pred.variance, pred.log_prob(y), pred.crps(y)
    lo, hi = pred.interval(0.9)               # exact mixture quantiles
    conf = bayesify.Conformal.fit(method.predict(x_cal), y_cal)   # finite-sample coverage
    bayesify.Predictor.load("bundle/").predict(raw_rows).records()  # raw rows in, records out

The public names below are imported on first use (PEP 562), so ``import bayesify`` and the
command line's ``--help`` do not start PyTorch. To export a name, add it to ``_EXPORTS`` (name ->
module), ``__all__`` and the ``TYPE_CHECKING`` block (for type checkers and editors).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module it is defined in
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(
        ["IBNN", "MCBN", "METHODS", "BayesByBackprop", "DeepEnsemble", "Deterministic",
         "MCBNConfig", "MCDropout", "Method", "MethodConfig", "StochasticNorm", "get_method",
         "load", "register_method"],
        "bayesify.methods",
    ),
    "Laplace": "bayesify.methods",
    "BatchEnsemble": "bayesify.methods",
    "EvidentialRegression": "bayesify.methods",
    "EvidentialClassifier": "bayesify.methods",
    "DDU": "bayesify.methods",
    "SNGP": "bayesify.methods",
    "PackedEnsemble": "bayesify.methods",
    "FlowPosterior": "bayesify.methods",
    "Distilled": "bayesify.methods",
    "distill": "bayesify.methods",
    "Conformal": "bayesify.posthoc.conformal",
    "calibrate_conformal": "bayesify.posthoc.conformal",
    "sampling": "bayesify.nn",
    "set_stochastic": "bayesify.nn",
    "CRPSForm": "bayesify.predictive",
    "Predictive": "bayesify.predictive",
    "Task": "bayesify.predictive",
    "Predictor": "bayesify.predictor",
    "TTA": "bayesify.methods",
    "SWAG": "bayesify.methods",
    "MultiSWAG": "bayesify.methods",
    "VCL": "bayesify.methods",
    "MultiHeadMLP": "bayesify.models.multihead",
    "VBLL": "bayesify.methods",
    "NegligibleSpreadWarning": "bayesify.methods.core.spread",
    "OOD_SCORES": "bayesify.predictive.ood",
    "fit_mahalanobis": "bayesify.methods.core.ood",
    "ood_scores": "bayesify.methods.core.ood",
}  # fmt: skip

__all__ = [
    "IBNN",
    "Laplace",
    "MCBN",
    "METHODS",
    "BatchEnsemble",
    "EvidentialRegression",
    "EvidentialClassifier",
    "PackedEnsemble",
    "BayesByBackprop",
    "CRPSForm",
    "DDU",
    "Conformal",
    "DeepEnsemble",
    "Deterministic",
    "FlowPosterior",
    "Distilled",
    "MCBNConfig",
    "MCDropout",
    "Method",
    "MethodConfig",
    "Predictive",
    "Predictor",
    "StochasticNorm",
    "TTA",
    "SWAG",
    "MultiSWAG",
    "Task",
    "calibrate_conformal",
    "distill",
    "get_method",
    "load",
    "register_method",
    "sampling",
    "set_stochastic",
    "VCL",
    "MultiHeadMLP",
    "VBLL",
    "NegligibleSpreadWarning",
    "OOD_SCORES",
    "fit_mahalanobis",
    "ood_scores",
    "SNGP",
]

if TYPE_CHECKING:
    from bayesify.methods import (
        DDU,
        IBNN,
        MCBN,
        METHODS,
        SNGP,
        SWAG,
        TTA,
        VBLL,
        VCL,
        BatchEnsemble,
        BayesByBackprop,
        DeepEnsemble,
        Deterministic,
        Distilled,
        EvidentialClassifier,
        EvidentialRegression,
        FlowPosterior,
        Laplace,
        MCBNConfig,
        MCDropout,
        Method,
        MethodConfig,
        MultiSWAG,
        PackedEnsemble,
        StochasticNorm,
        distill,
        get_method,
        load,
        register_method,
    )
    from bayesify.methods.core.ood import fit_mahalanobis, ood_scores
    from bayesify.methods.core.spread import NegligibleSpreadWarning
    from bayesify.models.multihead import MultiHeadMLP
    from bayesify.nn import sampling, set_stochastic
    from bayesify.posthoc.conformal import Conformal, calibrate_conformal
    from bayesify.predictive import CRPSForm, Predictive, Task
    from bayesify.predictive.ood import OOD_SCORES
    from bayesify.predictor import Predictor


def __getattr__(name: str) -> Any:
    """A public name or a subpackage (``bayesify.metrics``), imported when first asked for."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
