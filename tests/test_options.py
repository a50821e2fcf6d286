"""One parser for every option: a wrong value names the option, the value and what is valid."""

from __future__ import annotations

import inspect
import re
import sys
from dataclasses import dataclass
from enum import Enum

import numpy as np
import pytest
import torch

import bayesify
from bayesify import options
from bayesify.data import load_uci
from bayesify.methods import METHODS
from bayesify.metrics import aupr, crps_gaussian, fit_constant_std
from bayesify.models import mlp
from bayesify.nn.gaussian_posterior import Prior
from bayesify.nn.stochastic_scale import StochasticScale
from bayesify.posthoc.noise import fit_noise_variance
from bayesify.predictive import Predictive
from bayesify.train import make_optimizer
from bayesify.train.distributed import DistributedSettings

ENUMS = [
    v
    for v in vars(options).values()
    if isinstance(v, type)
    and issubclass(v, Enum)
    and v.__module__.startswith(options.__name__ + ".")
]


def _valid(kind: type[Enum]) -> str:
    return ", ".join(m.value for m in kind)


def _config(method: str):
    return METHODS[method].Config


Y = torch.zeros(3)

#: (what is called, the option's name, the bad value as shown, the valid values as shown)
BAD_ENUM_VALUES = [
    (lambda: _config("bbb")(prior="foo"), "prior", "'foo'", _valid(options.PriorKind)),
    (lambda: _config("bbb")(kl_schedule="step"), "kl_schedule", "'step'", "constant, linear"),
    (lambda: _config("bbb")(conv_estimator="x"), "conv_estimator", "'x'", "shared, flipout"),
    (lambda: _config("mcbn")(statistics="batch"), "statistics", "'batch'", "bank, gaussian"),
    (lambda: _config("mcbn")(task="clasification"), "task", "'clasification'", "regression"),
    (lambda: _config("mcbn")(noise_objective="nll"), "noise_objective", "'nll'", "crps, pll"),
    (lambda: _config("stochastic-norm")(noise="loud"), "noise", "'loud'", "learned, bn, none"),
    (lambda: _config("stochastic-norm")(sigma_per=1), "sigma_per", "1", "channel, layer"),
    (lambda: _config("ibnn")(task=None), "task", "None", "regression, classification"),
    (lambda: Prior(kind="laplace"), "prior kind", "'laplace'", "gaussian, mixture"),
    (lambda: StochasticScale(torch.nn.Linear(2, 2), "x"), "noise", "'x'", "learned, bn, none"),
    (lambda: DistributedSettings(batch_norm="global"), "batch_norm", "'global'", "replica, sync"),
    (lambda: make_optimizer([], "lbfgs", 0.1), "optimizer", "'lbfgs'", "adam, adamw, sgd"),
    (lambda: mlp(2, norm="layer"), "norm", "'layer'", "batch, none"),
    (lambda: load_uci("yacht", 0, protocol="x"), "UCI split protocol", "'x'", "gal, teye"),
    (lambda: Predictive(torch.zeros(2, 3), "reg"), "task", "'reg'", "regression"),
    (lambda: Predictive(torch.zeros(2, 3), "regression").crps(Y, form="x"), "form", "'x'", "mix"),
    (lambda: crps_gaussian(Y, 1.0, Y, reduction="avg"), "reduction", "'avg'", "mean, sum, none"),
    (lambda: aupr([0.0], [1.0], positive="ood"), "positive", "'ood'", "out, in"),
    (lambda: fit_constant_std(Y, Y, "mse"), "objective", "'mse'", "crps, pll"),
    (lambda: fit_noise_variance(torch.zeros(2, 3), Y, "mse"), "objective", "'mse'", "crps, pll"),
    (lambda: bayesify.methods.bbb.bayes_by_backprop.kl_weight("x", 0.5), "kl_schedule", "'x'", ""),
]

#: wrong types of numeric and boolean fields, as the command line's --option key=value gives them
BAD_TYPED_VALUES = [
    ("mcbn", "bank_size", "abc", "an int"),
    ("mcbn", "bank_size", 2.5, "an int"),
    ("mcbn", "bank_size", True, "an int"),
    ("mcbn", "bank_batch_size", "big", "an int or None"),
    ("mcbn", "effective_batch_size", "x", "a number or None"),
    ("mcbn", "noise_samples", None, "an int"),
    ("bbb", "prior_sigma", "wide", "a number"),
    ("bbb", "last_k", 1.5, "an int or None"),
    ("mc-dropout", "p", "half", "a number or None"),
    ("stochastic-norm", "stochastic_bias", "yes", "true or false"),
    ("ensemble", "members", "five", "an int"),
    ("ensemble", "init_seed", "0", "an int"),
    ("ibnn", "components", [4], "an int"),
]


@pytest.mark.parametrize(("call", "option", "shown", "valid"), BAD_ENUM_VALUES)
def test_bad_choice_names_option_value_and_valid_values(call, option, shown, valid):
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"unknown {option} {shown}; valid: "), message
    assert valid in message and "\n" not in message


@pytest.mark.parametrize(("method", "option", "value", "expected"), BAD_TYPED_VALUES)
def test_bad_typed_option_names_option_value_and_type(method, option, value, expected):
    with pytest.raises(ValueError) as info:
        METHODS[method](mlp(2), **{option: value})
    assert str(info.value) == f"{option} must be {expected}, got {value!r}"


def test_options_are_converted_by_their_declared_type():
    cfg = _config("mcbn")(effective_batch_size=32, statistics="gaussian", task="classification")
    assert type(cfg.effective_batch_size) is float and cfg.effective_batch_size == 32.0
    assert cfg.statistics is options.Statistics.GAUSSIAN
    assert cfg.task is options.Task.CLASSIFICATION
    assert _config("mcbn")(bank_size=torch.tensor(3).numpy()[()]).bank_size == 3  # numpy int
    assert _config("mcbn")(bank_batch_size=None).bank_batch_size is None
    cfg = _config("bbb")(conv_estimator="flipout", prior=options.PriorKind.MIXTURE)
    assert cfg.conv_estimator is options.ConvEstimator.FLIPOUT
    assert cfg.to_dict()["conv_estimator"] == "flipout"  # saved as the plain string
    assert type(cfg).from_dict(cfg.to_dict()) == cfg


def test_parse_value_literal_and_passthrough():
    from typing import Any, Literal

    assert options.parse_value(Literal["auto"] | int | None, "auto", option="m") == "auto"
    assert options.parse_value(Literal["auto"] | int | None, 5, option="m") == 5
    with pytest.raises(ValueError) as info:
        options.parse_value(Literal["auto"] | int | None, "x", option="m")
    message = str(info.value)  # the arms in the Union's order
    assert message.startswith("m must be ") and message.endswith(", got 'x'")
    assert all(part in message for part in ("one of 'auto'", "an int", "None"))
    value = {"a": 1}
    assert options.parse_value(dict[str, Any], value, option="d") is value


def test_parse_fields_on_any_dataclass():
    @dataclass(frozen=True)
    class Tiny:
        n: int = 1
        kind: options.Norm = options.Norm.BATCH

        def __post_init__(self) -> None:
            options.parse_fields(self)

    assert Tiny(kind="none").kind is options.Norm.NONE
    with pytest.raises(ValueError, match=re.escape("unknown kind 'x'; valid: batch, none")):
        Tiny(kind="x")


def test_every_option_member_is_documented():
    """Each Enum and each member has a docstring the reference docs can show."""
    assert len(ENUMS) >= 15
    for kind in ENUMS:
        source = inspect.getsource(sys.modules[kind.__module__])
        assert kind.__doc__ and kind.__doc__ != Enum.__doc__, kind
        for member in kind:
            pattern = rf'\n    {member.name} = "{member.value}"\n    """\S'
            assert re.search(pattern, source), f"{kind.__name__}.{member.name} has no docstring"


def test_enums_live_in_one_module_and_old_names_still_import():
    from bayesify import metrics, predictive
    from bayesify.methods import KLSchedule
    from bayesify.methods.mcbn.mcbn import Statistics
    from bayesify.metrics import ConstantStdObjective, Reduction
    from bayesify.posthoc.noise import NoiseObjective

    assert bayesify.Task is options.Task and bayesify.CRPSForm is options.CRPSForm
    assert predictive.Task is options.Task and metrics.Reduction is Reduction is options.Reduction
    assert ConstantStdObjective is NoiseObjective is options.NoiseObjective
    assert KLSchedule is options.KLSchedule and Statistics is options.Statistics


def test_one_noise_objective_with_one_default():
    defaults = {
        inspect.signature(fit_noise_variance).parameters["objective"].default,
        inspect.signature(fit_constant_std).parameters["objective"].default,
        bayesify.MethodConfig().noise_objective,
    }
    assert defaults == {options.NoiseObjective.PLL}
    mean, y = torch.tensor([0.0, 0.0, 0.0]), torch.tensor([1.0, -2.0, 2.0])
    assert fit_constant_std(mean, y) == pytest.approx(3.0**0.5)  # the PLL closed form


def test_shown_gives_numpy_and_torch_scalars_as_plain_values():
    from bayesify.options import shown

    assert shown(np.int64(1)) == "1" and shown(np.float32(1.5)) == "1.5"
    assert shown(np.str_("a")) == "'a'" and shown(torch.tensor(3)) == "3"
    assert shown([np.int64(1), "x"]) == "[1, 'x']" and shown((np.int64(2),)) == "(2,)"
    assert shown(np.array([1, 2])) == "[1, 2]" and shown(None) == "None"


def test_errors_reachable_from_the_api_print_no_numpy_reprs():
    import bayesify
    from bayesify.models import mlp

    method = bayesify.MCDropout(mlp(2, hidden=(4,), dropout=0.1, norm=None))
    method.noise_variance = 1.0
    cases = [
        (lambda: method.predict(torch.randn(3, 2), samples=np.int64(0)), "got 0"),
        (lambda: method.predict(torch.randn(3, 2), 2).interval(np.float64(1.5)), "got 1.5"),
        (lambda: bayesify.MCBN(mlp(2, hidden=(4,)), bank_size=np.float64(2.5)), "got 2.5"),
        (lambda: bayesify.MCBN(mlp(2, hidden=(4,)), statistics=np.str_("x")), "unknown"),
    ]
    for call, said in cases:
        with pytest.raises(ValueError) as info:
            call()
        assert said in str(info.value) and "np." not in str(info.value), str(info.value)
