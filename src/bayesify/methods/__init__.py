"""Posterior approximations behind one interface; registry by name."""

from bayesify.methods.base import Method, MethodConfig
from bayesify.methods.bayes_by_backprop import BayesByBackprop, BBBConfig, KLSchedule
from bayesify.methods.continual import VCL, VCLConfig
from bayesify.methods.deterministic import Deterministic
from bayesify.methods.distill import distill
from bayesify.methods.distilled import Distilled, DistilledConfig
from bayesify.methods.ensemble import DeepEnsemble, EnsembleConfig
from bayesify.methods.flow_posterior import FlowConfig, FlowPosterior
from bayesify.methods.ibnn import IBNN, IBNNConfig
from bayesify.methods.laplace import Laplace, LaplaceConfig
from bayesify.methods.mc_dropout import MCDropout, MCDropoutConfig
from bayesify.methods.mcbn import MCBN, MCBNConfig
from bayesify.methods.registry import (
    METHODS,
    get_method,
    load,
    method_summary,
    register_method,
    resolve_method_names,
)
from bayesify.methods.stochastic_norm import StochasticNorm, StochasticNormConfig
from bayesify.methods.swag import SWAG, MultiSWAG, MultiSWAGConfig, SWAGConfig
from bayesify.methods.tta import TTA, TTAConfig
from bayesify.nn.folding import DEFAULT_MAX_ROWS, resolve_max_rows

__all__ = [
    "DEFAULT_MAX_ROWS",
    "METHODS",
    "IBNN",
    "IBNNConfig",
    "Laplace",
    "LaplaceConfig",
    "MCBN",
    "MCBNConfig",
    "MCDropout",
    "MCDropoutConfig",
    "BayesByBackprop",
    "BBBConfig",
    "KLSchedule",
    "DeepEnsemble",
    "EnsembleConfig",
    "Deterministic",
    "Method",
    "MethodConfig",
    "get_method",
    "load",
    "method_summary",
    "register_method",
    "resolve_max_rows",
    "resolve_method_names",
    "StochasticNorm",
    "StochasticNormConfig",
    "FlowConfig",
    "FlowPosterior",
    "TTA",
    "TTAConfig",
    "SWAG",
    "SWAGConfig",
    "MultiSWAG",
    "MultiSWAGConfig",
    "VCL",
    "VCLConfig",
    "Distilled",
    "DistilledConfig",
    "distill",
]
