"""Stochastic layers that know the sample axis, and model surgery."""

from bayesify.nn.folding import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    MaxRows,
    check_sample_bytes,
    chunk_plan,
    fold_samples,
    forward_in_chunks,
    repeat_samples,
    resolve_max_rows,
)
from bayesify.nn.mc_batchnorm import (
    GroupStatistics,
    MCBatchNorm,
    Statistics,
    StatisticsPlan,
    convert_batchnorm,
)
from bayesify.nn.node_noise import NodeNoise, add_node_noise
from bayesify.nn.row_noise import (
    RowNoise,
    RowNoiseModule,
    TrainingNoiseModule,
    hash_uniform,
    noisy_training,
)
from bayesify.nn.sampled_linear import SampledLinear, WeightPosterior, sample_last_linear
from bayesify.nn.stochastic import (
    SamplingPlan,
    StochasticModule,
    generator_device,
    group_bytes,
    reference_loop,
    sampling,
    select_groups,
    set_stochastic,
    stochastic_modules,
)
from bayesify.nn.stochastic_scale import StochasticScale, add_stochastic_scale

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ROWS",
    "MaxRows",
    "GroupStatistics",
    "MCBatchNorm",
    "NodeNoise",
    "RowNoise",
    "RowNoiseModule",
    "SampledLinear",
    "SamplingPlan",
    "Statistics",
    "StatisticsPlan",
    "StochasticModule",
    "StochasticScale",
    "TrainingNoiseModule",
    "WeightPosterior",
    "add_node_noise",
    "add_stochastic_scale",
    "check_sample_bytes",
    "chunk_plan",
    "convert_batchnorm",
    "fold_samples",
    "forward_in_chunks",
    "generator_device",
    "group_bytes",
    "hash_uniform",
    "noisy_training",
    "reference_loop",
    "sample_last_linear",
    "repeat_samples",
    "resolve_max_rows",
    "sampling",
    "select_groups",
    "set_stochastic",
    "stochastic_modules",
]
