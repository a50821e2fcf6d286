"""Stochastic layers that know the sample axis, and model surgery."""

from bayesify.nn.mc_batchnorm import MCBatchNorm, convert_batchnorm
from bayesify.nn.stochastic import (
    StochasticModule,
    fold_samples,
    repeat_samples,
    sampling,
    set_stochastic,
    stochastic_modules,
)

__all__ = [
    "MCBatchNorm",
    "StochasticModule",
    "convert_batchnorm",
    "fold_samples",
    "repeat_samples",
    "sampling",
    "set_stochastic",
    "stochastic_modules",
]
