"""Stochastic normalisation: weight-normalised layers with stochastic per-channel scales
(`stochastic_norm.py`)."""

from bayesify.methods.stochastic_norm.stochastic_norm import StochasticNorm, StochasticNormConfig

__all__ = ["StochasticNorm", "StochasticNormConfig"]
