"""Stochastic layers that know the sample axis, and model surgery."""

from bayesify.nn.mc_batchnorm import MCBatchNorm, convert_batchnorm
from bayesify.nn.node_noise import NodeNoise, add_node_noise, noisy_training, only_group
from bayesify.nn.stochastic import (
    StochasticModule,
    fold_samples,
    repeat_samples,
    sampling,
    set_stochastic,
    stochastic_modules,
)
from bayesify.nn.stochastic_scale import StochasticScale, add_stochastic_scale

__all__ = [
    "MCBatchNorm",
    "NodeNoise",
    "StochasticModule",
    "StochasticScale",
    "add_node_noise",
    "add_stochastic_scale",
    "convert_batchnorm",
    "fold_samples",
    "noisy_training",
    "only_group",
    "repeat_samples",
    "sampling",
    "set_stochastic",
    "stochastic_modules",
]
