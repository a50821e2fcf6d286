"""Posterior approximations behind one interface; registry by name."""

from bayesify.methods.batch_ensemble.batch_ensemble import BatchEnsemble, BatchEnsembleConfig
from bayesify.methods.bbb.bayes_by_backprop import BayesByBackprop, BBBConfig
from bayesify.methods.continual.vcl import VCL, VCLConfig
from bayesify.methods.core.base import Method, MethodConfig
from bayesify.methods.core.deterministic import Deterministic
from bayesify.methods.ddu.ddu import DDU, DDUConfig
from bayesify.methods.distillation.distill import distill
from bayesify.methods.distillation.distilled import Distilled, DistilledConfig
from bayesify.methods.dropout.mc_dropout import MCDropout, MCDropoutConfig
from bayesify.methods.ensemble.ensemble import DeepEnsemble, EnsembleConfig
from bayesify.methods.evidential.classification import (
    EvidentialClassifier,
    EvidentialClassifierConfig,
)
from bayesify.methods.evidential.regression import (
    EvidentialRegression,
    EvidentialRegressionConfig,
)
from bayesify.methods.flow.flow_posterior import FlowConfig, FlowPosterior
from bayesify.methods.ibnn.ibnn import IBNN, IBNNConfig
from bayesify.methods.laplace.config import LaplaceConfig
from bayesify.methods.laplace.laplace import Laplace
from bayesify.methods.mcbn.mcbn import MCBN, MCBNConfig
from bayesify.methods.packed_ensemble.packed_ensemble import PackedEnsemble, PackedEnsembleConfig
from bayesify.methods.registry import (
    METHODS,
    get_method,
    load,
    method_summary,
    register_method,
    resolve_method_names,
)
from bayesify.methods.sngp.sngp import SNGP, SNGPConfig
from bayesify.methods.stochastic_norm.stochastic_norm import StochasticNorm, StochasticNormConfig
from bayesify.methods.swag.swag import SWAG, MultiSWAG, MultiSWAGConfig, SWAGConfig
from bayesify.methods.tta.tta import TTA, TTAConfig
from bayesify.methods.vbll.vbll import VBLL, VBLLConfig
from bayesify.nn.folding import DEFAULT_MAX_ROWS, resolve_max_rows
from bayesify.options import KLSchedule

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
    "BatchEnsemble",
    "BatchEnsembleConfig",
    "EvidentialRegression",
    "EvidentialRegressionConfig",
    "EvidentialClassifier",
    "EvidentialClassifierConfig",
    "VBLL",
    "VBLLConfig",
    "DDU",
    "DDUConfig",
    "SNGP",
    "SNGPConfig",
    "PackedEnsemble",
    "PackedEnsembleConfig",
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
