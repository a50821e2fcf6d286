"""Every named choice the library takes, and the one way option values are parsed.

An option that takes one of a few names is a ``StrEnum`` here, so a plain string works wherever a
member does (``task="regression"`` or ``Task.REGRESSION``), and every member carries a docstring
that the reference docs show. Modules import their Enum from here; the old names stay importable
from where they were defined before (``bayesify.predictive.Task``, ``bayesify.metrics.Reduction``,
...).

:func:`parse_option` turns a string into an Enum member and :func:`parse_value` checks any value
against a field's type (``int``, ``float``, ``bool``, ``str``, ``X | None``, an Enum, a
``Literal``); :func:`parse_fields` does that for every field of a dataclass. A wrong value is a
one-line ``ValueError`` naming the option, the bad value and what is valid::

    unknown prior 'foo'; valid: gaussian, mixture
    bank_size must be an int, got 'abc'

This package imports nothing else of the library (it sits at the bottom of the layers), so the
command line can read it without starting PyTorch.

The Enums live in :mod:`~bayesify.options.kinds`, the parsing in
:mod:`~bayesify.options.parsing`, test-time augmentation specs in
:mod:`~bayesify.options.transforms`; import them from here.
"""

from __future__ import annotations

from bayesify.options.kinds import (
    Augment,
    BankDraw,
    BatchNormMode,
    ConvEstimator,
    CoresetKind,
    CRPSForm,
    Evidence,
    EvidentialLoss,
    FastWeightInit,
    FlowKind,
    GPCovWeighting,
    GPPrediction,
    HessianStructure,
    KLSchedule,
    LaplaceNoise,
    LaplacePredictive,
    LaplaceSubset,
    Likelihood,
    Link,
    MemberBatch,
    NoiseObjective,
    NoiseProtocol,
    Norm,
    OODPositive,
    OptimizerName,
    PriorFit,
    PriorKind,
    Reduction,
    ScaleNoise,
    SigmaPer,
    SplitProtocol,
    Statistics,
    SwagBatchNorm,
    SwagSchedule,
    Task,
    VBLLCovariance,
)
from bayesify.options.parsing import parse_fields, parse_option, parse_value, shown
from bayesify.options.transforms import (
    AUGMENTATION_DEFAULTS,
    Augmentation,
    format_transforms,
    parse_transforms,
)

__all__ = [
    "AUGMENTATION_DEFAULTS",
    "Augment",
    "Augmentation",
    "BankDraw",
    "BatchNormMode",
    "CRPSForm",
    "Evidence",
    "EvidentialLoss",
    "ConvEstimator",
    "CoresetKind",
    "FastWeightInit",
    "FlowKind",
    "GPCovWeighting",
    "GPPrediction",
    "HessianStructure",
    "KLSchedule",
    "LaplaceNoise",
    "LaplacePredictive",
    "LaplaceSubset",
    "Likelihood",
    "Link",
    "MemberBatch",
    "VBLLCovariance",
    "NoiseObjective",
    "NoiseProtocol",
    "Norm",
    "OODPositive",
    "OptimizerName",
    "PriorFit",
    "PriorKind",
    "Reduction",
    "ScaleNoise",
    "SigmaPer",
    "SplitProtocol",
    "Statistics",
    "SwagBatchNorm",
    "SwagSchedule",
    "Task",
    "format_transforms",
    "parse_fields",
    "parse_option",
    "parse_transforms",
    "parse_value",
    "shown",
]
