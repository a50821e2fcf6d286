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

This module imports nothing of the library (it sits at the bottom of the layers), so the command
line can read it without starting PyTorch.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import types
import typing
from enum import Enum, StrEnum
from typing import Any, TypeVar

__all__ = [
    "Augmentation",
    "BatchNormMode",
    "CRPSForm",
    "ConvEstimator",
    "HessianStructure",
    "FlowKind",
    "CoresetKind",
    "KLSchedule",
    "LaplacePredictive",
    "LaplaceSubset",
    "Link",
    "Norm",
    "NoiseObjective",
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
]

E = TypeVar("E", bound=Enum)


# ---------------------------------------------------------------- predictions and metrics
class Task(StrEnum):
    """What the network predicts."""

    REGRESSION = "regression"
    """Real targets ``[N]``: per-sample means ``[T, N]`` plus aleatoric noise τ⁻¹."""
    CLASSIFICATION = "classification"
    """Class labels ``[N]``: per-sample class probabilities ``[T, N, C]``."""


class NoiseProtocol(StrEnum):
    """How the regression noise τ⁻¹ and the constant-uncertainty baseline are fitted on
    validation data (:mod:`bayesify.posthoc.noise`, :class:`bayesify.bench.scores.NoiseFit`)."""

    TEYE = "teye"
    """Teye et al. 2018: one τ per model fitted by CRPS inside the authors' per-dataset range and
    used for PLL and CRPS alike; the baseline's constant variance fitted by CRPS in that range."""
    BAYESIFY = "bayesify"
    """A τ per metric (PLL and CRPS each fit their own) over a wide range, and the baseline's
    variance for PLL as the mean squared error."""


class Likelihood(StrEnum):
    """The regression noise model of a method (``MethodConfig.likelihood``)."""

    HOMOSCEDASTIC = "homoscedastic"
    """One noise variance τ⁻¹ for every input, fitted on validation data."""
    HETEROSCEDASTIC = "heteroscedastic"
    """A variance predicted per input by the network (outputs ``[N, 2]``: mean, variance)."""


class CRPSForm(StrEnum):
    """Which predictive distribution :meth:`Predictive.crps` scores."""

    MIXTURE = "mixture"
    """The exact Gaussian mixture over the T samples."""
    GAUSSIAN = "gaussian"
    """One Gaussian with the mixture's mean and total variance (Teye et al. 2018)."""


class Reduction(StrEnum):
    """How a metric aggregates its per-point values."""

    MEAN = "mean"
    """The mean over points (a 0-dim tensor)."""
    SUM = "sum"
    """The sum over points (a 0-dim tensor)."""
    NONE = "none"
    """Keep one value per point (``[N]``)."""


class OODPositive(StrEnum):
    """Which set is the positive class of :func:`bayesify.metrics.aupr`."""

    OUT = "out"
    """Out-of-distribution points are positives; a higher score means more likely out."""
    IN = "in"
    """In-distribution points are positives (scores are negated)."""


class NoiseObjective(StrEnum):
    """What a regression noise level is fitted for on validation data: τ⁻¹ of a Monte Carlo
    predictive (:func:`bayesify.posthoc.noise.fit_noise_variance`, ``MethodConfig.noise_objective``)
    and the constant σ of the constant-uncertainty baseline
    (:func:`bayesify.metrics.fit_constant_std`).

    The default is :attr:`PLL` everywhere: a τ fitted for CRPS can shrink to ~0 when the
    epistemic spread alone scores well, and the mixture PLL of near-delta samples is then
    meaningless. Teye et al. (2018) fit for CRPS; their protocol asks for :attr:`CRPS` by name.
    """

    CRPS = "crps"
    """Minimise the CRPS of the moment-matched Gaussian (Teye et al. 2018)."""
    PLL = "pll"
    """Maximise the predictive log likelihood (the sample mixture's; for a constant σ the
    closed form ``σ² = mean (y - mean)²``)."""


# ---------------------------------------------------------------- data, models, training
class SplitProtocol(StrEnum):
    """Which train/test splits :func:`bayesify.data.load_uci` uses."""

    GAL = "gal"
    """The 20 fixed 90/10 splits (5 for protein) of Hernández-Lobato & Adams / Gal &
    Ghahramani, read from the index files."""
    TEYE = "teye"
    """Teye et al.'s 5 random 80/20 splits (legacy numpy generator seeded ``split + 1``)."""


class Norm(StrEnum):
    """Normalisation after each hidden linear layer of :func:`bayesify.models.mlp`."""

    BATCH = "batch"
    """``BatchNorm1d`` (what MCBN samples)."""
    NONE = "none"
    """No normalisation."""


class OptimizerName(StrEnum):
    """The optimiser of the training loop."""

    ADAM = "adam"
    """``torch.optim.Adam`` (weight decay, if any, added to the gradient)."""
    ADAMW = "adamw"
    """``torch.optim.AdamW`` (decoupled weight decay)."""
    SGD = "sgd"
    """``torch.optim.SGD`` with momentum."""


class BatchNormMode(StrEnum):
    """Where batch norm takes its batch statistics from in data-parallel training."""

    REPLICA = "replica"
    """Each replica's own mini-batch (the default)."""
    SYNC = "sync"
    """``SyncBatchNorm``: statistics of the global batch."""


# ---------------------------------------------------------------- methods and their layers
class Statistics(StrEnum):
    """Where MCBN's per-sample batch statistics come from."""

    BANK = "bank"
    """Recorded statistics of real training mini-batches (Teye et al. 2018)."""
    GAUSSIAN = "gaussian"
    """Drawn from their large-sample law given the running statistics; needs no training data
    at prediction."""


class PriorKind(StrEnum):
    """The weight prior of Bayes by Backprop."""

    GAUSSIAN = "gaussian"
    """``N(0, σ²)``."""
    MIXTURE = "mixture"
    """The scale mixture ``π N(0, σ1²) + (1 - π) N(0, σ2²)`` (Blundell et al. 2015)."""


class KLSchedule(StrEnum):
    """How Bayes by Backprop's KL weight β grows with training progress in [0, 1)."""

    CONSTANT = "constant"
    """β = 1 throughout."""
    LINEAR = "linear"
    """β rises linearly from 0 to 1 over the first ``kl_warmup`` of training, then stays 1."""
    COSINE = "cosine"
    """β rises along a half cosine over the first ``kl_warmup`` of training."""
    CYCLIC = "cyclic"
    """The linear ramp repeated in each of ``kl_cycles`` cycles (Fu et al. 2019)."""


class ConvEstimator(StrEnum):
    """The training noise of Bayes by Backprop's convolutions."""

    SHARED = "shared"
    """One weight sample per mini-batch: one convolution."""
    FLIPOUT = "flipout"
    """Per-row noise by flipout (Wen et al. 2018): twice the convolutions."""


class ScaleNoise(StrEnum):
    """The noise of StochasticNorm's per-channel scale."""

    LEARNED = "learned"
    """A learned σ per channel (or layer), trained by the variational objective."""
    BN = "bn"
    """Fixed "noise like BN": multiplicative and additive Gaussian noise per row and
    channel (Shekhovtsov & Flach, eq. 7)."""
    NONE = "none"
    """No noise: a deterministic normalised network."""


class SigmaPer(StrEnum):
    """Whether StochasticNorm learns one σ per channel or one per layer."""

    CHANNEL = "channel"
    """One σ per channel."""
    LAYER = "layer"
    """One σ shared by the layer's channels."""


# ---------------------------------------------------------------- Laplace
class LaplaceSubset(StrEnum):
    """Which weights the Laplace approximation puts a Gaussian on."""

    LAST_LAYER = "last-layer"
    """The last ``nn.Linear`` only; the body stays at its trained weights and runs once."""
    ALL = "all"
    """Every ``nn.Linear`` and ``nn.Conv2d``; batch norm and other parameters stay at MAP."""


class HessianStructure(StrEnum):
    """The structure of Laplace's generalised Gauss-Newton matrix."""

    FULL = "full"
    """The whole matrix over the layer (last layer only: its size is the square of its
    weights)."""
    KFAC = "kfac"
    """Kronecker factors per layer, weight and bias blocks apart (Ritter et al. 2018)."""
    DIAG = "diag"
    """The diagonal."""


class PriorFit(StrEnum):
    """How Laplace chooses its prior precision δ."""

    MARGLIK = "marglik"
    """Maximise the Laplace marginal likelihood of the training data (closed form in δ;
    homoscedastic regression fits σ² with it)."""
    GRID = "grid"
    """The δ of a log grid 1e-4 .. 1e4 with the best validation NLL (needs validation data)."""


class LaplacePredictive(StrEnum):
    """How Laplace turns its weight posterior into predictions."""

    GLM = "glm"
    """The network linearised in its weights (Immer et al. 2021): a Gaussian over outputs."""
    SAMPLED = "sampled"
    """The network itself at weights drawn from the posterior."""


class Link(StrEnum):
    """How Laplace's Gaussian over logits becomes class probabilities (classification, GLM)."""

    PROBIT = "probit"
    """The probit approximation ``softmax(f / sqrt(1 + π/8 var))``: no draws, every sample the
    same (mutual information 0); last layer only."""
    MC = "mc"
    """T draws of the logits, softmax of each."""


class FlowKind(StrEnum):
    """The distribution of the flow posterior's last-layer weights."""

    NSF = "nsf"
    """A neural spline flow: rational-quadratic spline coupling layers (Durkan et al. 2019)."""
    REALNVP = "realnvp"
    """RealNVP: affine coupling layers (Dinh et al. 2017)."""
    MEAN_FIELD = "mean-field"
    """No flow: a diagonal Gaussian fitted by the same ELBO (the mean-field baseline)."""


class SwagSchedule(StrEnum):
    """The learning rate of SWAG's SGD while it collects weight snapshots."""

    CONSTANT = "constant"
    """``swag_lr`` throughout; a snapshot every ``collect_every`` steps (Maddox et al. 2019)."""
    CYCLIC = "cyclic"
    """Down from ``swag_lr`` to ``swag_lr_min`` linearly in each cycle of ``collect_every``
    steps, a snapshot at each cycle's end (Izmailov et al. 2018)."""


class SwagBatchNorm(StrEnum):
    """Where SWAG's batch-norm statistics come from for each weight sample."""

    RECOMPUTE = "recompute"
    """Recomputed for every sample from the training rows the bundle stores (``bn_rows``), as
    Maddox et al. recompute them per sample."""
    SWA = "swa"
    """Those of each member's SWA mean, computed once on the same rows and shared by its
    samples: no extra rows per call."""


class CoresetKind(StrEnum):
    """How variational continual learning picks each task's coreset (Nguyen et al. 2018)."""

    NONE = "none"
    """No coreset: prediction uses the propagated posterior itself."""
    RANDOM = "random"
    """A uniformly random subset of the task's training rows."""
    K_CENTER = "k-center"
    """Greedy k-center in input space: start from a random row, then add the row farthest from
    the rows already chosen."""


class Augment(StrEnum):
    """The inputs a distilled student learns from besides the training inputs themselves."""

    MIXUP = "mixup"
    """Convex blends ``λ x_i + (1 - λ) x_j`` of two random training inputs, λ ~ U(0, 1)."""
    NOISE = "noise"
    """Training inputs plus Gaussian noise of standard deviation ``noise`` (network input
    units; the default, σ = 1)."""
    NONE = "none"
    """The training inputs alone."""


# ---------------------------------------------------------------- parsing
def shown(value: Any) -> str:
    """``value`` as a one-line error shows it: Python's repr of plain values, but numpy and torch
    scalars as the plain number or string they hold (``1``, not ``np.int64(1)``) and lists and
    tuples element by element."""
    if isinstance(value, list | tuple):
        items = ", ".join(shown(v) for v in value)
        return f"[{items}]" if isinstance(value, list) else f"({items}{',' * (len(value) == 1)})"
    if type(value).__module__ in ("numpy", "torch") and hasattr(value, "tolist"):
        return shown(value.tolist())  # a scalar's number, an array's nested lists
    return repr(value)


def parse_option(
    kind: type[E], value: Any, *, option: str, error: type[ValueError] = ValueError
) -> E:
    """``value`` (a member or its string) as a member of ``kind``.

    Anything else raises ``error`` (a ``ValueError``) naming ``option``, the value and the valid
    values: ``unknown prior 'foo'; valid: gaussian, mixture``.
    """
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            pass
    valid = ", ".join(str(m.value) for m in kind)
    raise error(f"unknown {option} {shown(value)}; valid: {valid}")


def _describe(hint: Any) -> str:
    """``int`` -> ``an int``, for messages."""
    if isinstance(hint, type) and issubclass(hint, Enum):
        return "one of " + ", ".join(str(m.value) for m in hint)
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    name = getattr(hint, "__name__", str(hint))
    return {"int": "an int", "float": "a number", "bool": "true or false", "str": "a string"}.get(
        name, name
    )


def parse_value(hint: Any, value: Any, *, option: str) -> Any:
    """``value`` checked against the type ``hint`` and converted where that is lossless.

    ``int``: an integer (not a bool); ``float``: any real number, returned as ``float``;
    ``bool``: a bool; ``str``: a string; an Enum: a member or its string (:func:`parse_option`);
    ``Literal[...]``: one of its values; ``X | Y``: the first arm that takes it (``None`` only
    for ``X | None``). Other types (dicts, tuples, ``Any``) pass unchecked. A bad value raises
    ``ValueError``: ``bank_size must be an int, got 'abc'``.
    """
    origin = typing.get_origin(hint)
    if origin is typing.Union or isinstance(hint, types.UnionType):
        arms = typing.get_args(hint)
        if value is None:
            if type(None) in arms:
                return None
        else:
            for arm in arms:
                if arm is type(None):
                    continue
                try:
                    return parse_value(arm, value, option=option)
                except ValueError:
                    continue
        expected = " or ".join("None" if a is type(None) else _describe(a) for a in arms)
        raise ValueError(f"{option} must be {expected}, got {shown(value)}")
    if isinstance(hint, type) and issubclass(hint, Enum):
        return parse_option(hint, value, option=option)
    if origin is typing.Literal:
        if value in typing.get_args(hint):
            return value
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
    elif hint is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    else:
        return value
    raise ValueError(f"{option} must be {_describe(hint)}, got {shown(value)}")


@functools.cache
def _field_hints(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.name in hints}


def parse_fields(obj: Any) -> None:
    """Check and convert every field of the dataclass instance ``obj`` by its declared type
    (:func:`parse_value`; frozen dataclasses too). For a config's ``__post_init__``."""
    for name, hint in _field_hints(type(obj)).items():
        object.__setattr__(obj, name, parse_value(hint, getattr(obj, name), option=name))


# ---------------------------------------------------------------- test-time augmentation
class Augmentation(StrEnum):
    """A transform kind of test-time augmentation (:class:`bayesify.TTA`), in a transform spec
    such as ``"flip,shift:2,noise:0.05"`` (:func:`parse_transforms`). Each (sample, row) pair
    draws its own transform."""

    FLIP = "flip"
    """Mirror the image left to right with probability 1/2 (no parameter). Images only."""
    SHIFT = "shift"
    """Translate by whole pixels, dy and dx uniform in ``-k .. k`` (``shift:k``, default 2);
    vacated pixels repeat the nearest edge pixel. Images only."""
    CROP = "crop"
    """Pad by ``p`` pixels by reflection and crop the original size at a uniform offset
    (``crop:p``, default 4; ``p`` below the image's height and width). Images only."""
    NOISE = "noise"
    """Add Gaussian noise of standard deviation ``σ`` to every input number (``noise:σ``,
    default 0.05), in the network's input units: standardised units for the table bundles
    bayesify trains (their inputs are standardised); images or tables."""


#: the parameter each transform kind takes when the spec gives none (None: takes none)
AUGMENTATION_DEFAULTS: dict[Augmentation, float | int | None] = {
    Augmentation.FLIP: None,
    Augmentation.SHIFT: 2,
    Augmentation.CROP: 4,
    Augmentation.NOISE: 0.05,
}


def parse_transforms(spec: Any) -> tuple[tuple[Augmentation, float | int | None], ...]:
    """A transform spec ``"flip,shift:2,noise:0.05"`` as ``((kind, parameter), ...)`` in the
    order given (the order they are applied in): ``shift``/``crop`` take a positive int,
    ``noise`` a positive number, ``flip`` none; a kind without ``:value`` gets its default
    (:data:`AUGMENTATION_DEFAULTS`). A bad spec is a one-line ``ValueError``."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(
            f"transforms must be a spec like 'flip,shift:2,noise:0.05', got {shown(spec)}"
        )
    out: list[tuple[Augmentation, float | int | None]] = []
    for item in spec.split(","):
        name, sep, raw = item.strip().partition(":")
        kind = parse_option(Augmentation, name.strip().lower(), option="transform")
        default = AUGMENTATION_DEFAULTS[kind]
        if not sep:
            out.append((kind, default))
            continue
        if default is None:
            raise ValueError(f"transform {kind.value} takes no value, got {item.strip()!r}")
        try:
            value: float | int = int(raw) if isinstance(default, int) else float(raw)
        except ValueError:
            what = "a positive int" if isinstance(default, int) else "a positive number"
            raise ValueError(f"transform {kind.value} takes {what}, got {raw.strip()!r}") from None
        if not value > 0 or value == float("inf"):
            raise ValueError(f"transform {kind.value} takes a value > 0, got {raw.strip()!r}")
        out.append((kind, value))
    return tuple(out)


def format_transforms(transforms: tuple[tuple[Augmentation, float | int | None], ...]) -> str:
    """The canonical spec of parsed transforms (``parse_transforms`` of it gives them back)."""
    return ",".join(k.value if v is None else f"{k.value}:{v!r}" for k, v in transforms)
