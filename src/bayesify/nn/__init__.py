"""Stochastic layers that know the sample axis, and model surgery."""

from bayesify.nn.mc_batchnorm import MCBatchNorm, convert_batchnorm
from bayesify.nn.node_noise import NodeNoise, add_node_noise
from bayesify.nn.row_noise import (
    RowNoise,
    RowNoiseModule,
    TrainingNoiseModule,
    hash_uniform,
    noisy_training,
)
from bayesify.nn.stochastic import (
    StochasticModule,
    fold_samples,
    generator_device,
    reference_loop,
    repeat_samples,
    sampling,
    select_groups,
    set_stochastic,
    stochastic_modules,
)
from bayesify.nn.stochastic_scale import StochasticScale, add_stochastic_scale

__all__ = [
    "MCBatchNorm",
    "NodeNoise",
    "RowNoise",
    "RowNoiseModule",
    "StochasticModule",
    "StochasticScale",
    "TrainingNoiseModule",
    "add_node_noise",
    "add_stochastic_scale",
    "convert_batchnorm",
    "fold_samples",
    "generator_device",
    "hash_uniform",
    "noisy_training",
    "reference_loop",
    "repeat_samples",
    "sampling",
    "select_groups",
    "set_stochastic",
    "stochastic_modules",
]
