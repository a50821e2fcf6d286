"""Methods by name, and loading bundles back into methods."""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
import warnings
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bayesify.data.preprocessing import Preprocessing
from bayesify.io import BundleError, read_config, read_weights, tensor_specs
from bayesify.methods.batch_ensemble.batch_ensemble import BatchEnsemble
from bayesify.methods.bbb.bayes_by_backprop import BayesByBackprop
from bayesify.methods.continual.vcl import VCL
from bayesify.methods.core.base import Method, MethodConfig
from bayesify.methods.core.bundle_checks import (
    BundleLimits,
    check_bundle,
    check_members,
    check_spec,
    counted_build,
    resize_like,
)
from bayesify.methods.core.deterministic import Deterministic
from bayesify.methods.core.inputs import check_device
from bayesify.methods.ddu.ddu import DDU
from bayesify.methods.distillation.distilled import Distilled
from bayesify.methods.dropout.mc_dropout import MCDropout
from bayesify.methods.ensemble.ensemble import DeepEnsemble
from bayesify.methods.evidential.classification import EvidentialClassifier
from bayesify.methods.evidential.regression import EvidentialRegression
from bayesify.methods.flow.flow_posterior import FlowPosterior
from bayesify.methods.ibnn.ibnn import IBNN
from bayesify.methods.laplace.laplace import Laplace
from bayesify.methods.mcbn.mcbn import MCBN
from bayesify.methods.packed_ensemble.packed_ensemble import PackedEnsemble
from bayesify.methods.sngp.sngp import SNGP
from bayesify.methods.stochastic_norm.stochastic_norm import StochasticNorm
from bayesify.methods.swag.swag import SWAG, MultiSWAG
from bayesify.methods.tta.tta import TTA
from bayesify.methods.vbll.vbll import VBLL
from bayesify.models import build_model, net_from_reference

METHODS: dict[str, type[Method]] = {
    "deterministic": Deterministic,
    "mcbn": MCBN,
    "mc-dropout": MCDropout,
    "bbb": BayesByBackprop,
    "ensemble": DeepEnsemble,
    "batch-ensemble": BatchEnsemble,
    "ddu": DDU,
    "packed-ensemble": PackedEnsemble,
    "ibnn": IBNN,
    "stochastic-norm": StochasticNorm,
    "laplace": Laplace,
    "flow": FlowPosterior,
    "tta": TTA,
    "swag": SWAG,
    "multiswag": MultiSWAG,
    "vcl": VCL,
    "distilled": Distilled,
    "evidential-regression": EvidentialRegression,
    "evidential-classification": EvidentialClassifier,
    "vbll": VBLL,
    "sngp": SNGP,
}


def register_method(cls: type[Method]) -> type[Method]:
    """Add a method class under its ``name``."""
    METHODS[cls.name] = cls
    return cls


def method_summary(cls: type) -> str:
    """The first sentence of ``cls``'s docstring, on one line, without reST markup: a sentence
    ends at a full stop followed by a capital letter or the end of the first paragraph, so
    "e.g. ``x``" or a sentence wrapped over several lines is kept whole."""
    paragraph = " ".join((inspect.getdoc(cls) or "").split("\n\n")[0].split())
    sentence = re.split(r"(?<=\.)\s+(?=[A-Z])", paragraph, maxsplit=1)[0]
    return sentence.replace("``", "`")


def get_method(name: str) -> type[Method]:
    """The method class called ``name``; the error lists valid names."""
    key = name.strip().lower().replace("_", "-")
    if key not in METHODS:
        raise ValueError(f"unknown method {name!r}; valid: {', '.join(sorted(METHODS))}")
    return METHODS[key]


def resolve_method_names(config_cls: type[MethodConfig], options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with method names turned into classes in the fields that hold a method class
    (e.g. an ensemble's member ``method``), as bundles and command lines give them."""
    out = dict(options)
    for f in fields(config_cls):
        if f.metadata.get("method_class") and isinstance(out.get(f.name), str):
            out[f.name] = get_method(out[f.name])
    return out


def load(path: str | Path, net: nn.Module | str | None = None, device: str | None = None) -> Method:
    """Load a bundle saved by ``method.save(path)``.

    Networks built by bayesify's model factories and ``nn.Sequential`` networks of standard
    torch layers are rebuilt from the bundle; for any other network pass ``net``: a freshly
    constructed instance of the same architecture, or ``"package.module:factory"`` naming a
    function that returns one.

    Nothing is allocated before the weights file's header (tensor names, shapes, dtypes) is
    checked against every tensor of the network the config describes, buffers included, built
    first on the meta device, and the build's layers, parameters and buffer numbers are within
    the limits of :class:`~bayesify.methods.core.bundle_checks.BundleLimits`; a malformed
    ``config.json`` is one :class:`BundleError`.
    """
    if device is not None:
        check_device(device)  # before any work: CUDA asked for where there is none
    limits = BundleLimits.from_env()
    cfg, weights = read_config(path)
    specs = tensor_specs(weights)
    if isinstance(net, str):
        net = net_from_reference(net)
    with _config_errors(path):
        if net is None:
            with torch.device("meta"), _quiet():  # shapes and dtypes without a byte of memory
                check_bundle(path, _method(path, cfg, None, limits).net, specs, limits)
        method = _method(path, cfg, net, limits)
        if net is not None:
            check_bundle(path, method.net, specs, limits)
    tensors = read_weights(weights)
    resize_like(method.net, tensors)
    method.net.load_state_dict(tensors)
    with _config_errors(path):
        _restore(method, cfg)
    if device is not None:
        method.to(device)
    method.net.eval()
    return method


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No warnings or log lines from the meta build (the real build says them once)."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


@contextlib.contextmanager
def _config_errors(path: str | Path) -> Iterator[None]:
    """Any error reading the config's values becomes one :class:`BundleError` line."""
    try:
        yield
    except (BundleError, ImportError):  # a missing optional dependency says so itself
        raise
    except RecursionError:
        raise BundleError(f"bundle {path}: config.json is nested too deeply") from None
    except KeyError as e:
        raise BundleError(f"bundle {path}: config.json lacks {e}") from None
    except (TypeError, ValueError, AttributeError, IndexError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BundleError(f"bundle {path}: config.json is malformed ({reason})") from None


def _method(
    path: str | Path, cfg: dict[str, Any], net: nn.Module | None, limits: BundleLimits
) -> Method:
    """The method the config describes around ``net`` (None: the network it records), its
    layers counted as they are built."""
    cls = get_method(cfg["method"])
    if net is None:
        if not cfg.get("model"):
            kind = cfg.get("network_class") or "a custom network"
            raise BundleError(
                f"bundle {path} holds {kind}, which bayesify cannot rebuild by itself: name a "
                "function returning a new instance of it, bayesify predict --net "
                "package.module:factory (on PYTHONPATH) or bayesify.load(path, "
                'net="package.module:factory"), or pass net=YourNet()'
            )
        check_spec(path, cfg["model"], limits)
        with counted_build(path, limits):
            net = build_model(cfg["model"])
    check_members(path, cfg["config"], net, limits)
    config = cls.Config.from_saved(resolve_method_names(cls.Config, cfg["config"]))
    with counted_build(path, limits):
        return cls(net, config, inplace=True)  # a network built here: no copy needed


def _restore(method: Method, cfg: dict[str, Any]) -> None:
    """The fitted state the config holds besides the weights."""
    method.noise_variance = float(cfg["noise_variance"])
    method.noise_fitted = bool(cfg.get("noise_fitted", True))  # bundles before the flag: trust
    method.constant_variance = cfg.get("constant_variance")
    method.input_shape = tuple(cfg["input_shape"]) if cfg.get("input_shape") else None
    method.metadata = cfg.get("metadata") or {}
    if not isinstance(method.metadata, dict):
        raise TypeError("metadata must be a JSON object")
    if cfg.get("preprocessing"):
        method.preprocessing = Preprocessing.from_dict(cfg["preprocessing"])
    method.load_extra_state(cfg.get("extra", {}))
