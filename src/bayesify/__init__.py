"""bayesify: turn ordinary PyTorch networks into approximate Bayesian ones and measure how good
their uncertainty is.

    method = bayesify.MCBN(net)
    method.fit((X, y), val=(Xv, yv), epochs=100, batch_size=32)
    pred = method.predict(x, samples=50)      # Predictive, samples [T, N] or [T, N, C]
    pred.mean, pred.variance, pred.log_prob(y), pred.crps(y)
    lo, hi = pred.interval(0.9)               # exact mixture quantiles
    conf = bayesify.Conformal.fit(method.predict(x_cal), y_cal)   # finite-sample coverage
"""

from bayesify.methods import (
    IBNN,
    MCBN,
    METHODS,
    BayesByBackprop,
    DeepEnsemble,
    Deterministic,
    MCBNConfig,
    MCDropout,
    Method,
    MethodConfig,
    StochasticNorm,
    get_method,
    load,
    register_method,
)
from bayesify.nn import sampling, set_stochastic
from bayesify.posthoc.conformal import Conformal, calibrate_conformal
from bayesify.predictive import CRPSForm, Predictive, Task

__version__ = "0.1.0"

__all__ = [
    "CRPSForm",
    "Conformal",
    "Deterministic",
    "IBNN",
    "MCBN",
    "MCBNConfig",
    "MCDropout",
    "BayesByBackprop",
    "DeepEnsemble",
    "METHODS",
    "Method",
    "MethodConfig",
    "Predictive",
    "Task",
    "calibrate_conformal",
    "get_method",
    "load",
    "register_method",
    "sampling",
    "set_stochastic",
    "StochasticNorm",
]
