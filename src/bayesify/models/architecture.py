"""Networks a bundle can rebuild without the user's Python session.

* An ``nn.Sequential`` of standard torch layers (Linear, Conv*, BatchNorm*, Dropout, activations,
  Flatten, pooling, ...) is recorded as a JSON list of ``{"name", "type", "kwargs"}`` and rebuilt
  by the ``"sequential"`` factory; constructor arguments are read back from the layers' own
  attributes, and the rebuilt network must have the same parameter and buffer shapes.
* Any other network is rebuilt by the user's own code, named ``"package.module:factory"``
  (:func:`net_from_reference`): ``factory()`` returns a new instance of the architecture.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from bayesify.models.registry import register_model

log = logging.getLogger(__name__)

__all__ = ["architecture_spec", "net_class_name", "net_from_reference", "sequential"]

#: torch.nn layer classes recorded by name; their constructor arguments are their attributes
_LAYER_NAMES = """
    Linear Bilinear Identity Flatten Unflatten Conv1d Conv2d Conv3d ConvTranspose1d
    ConvTranspose2d ConvTranspose3d BatchNorm1d BatchNorm2d BatchNorm3d LayerNorm GroupNorm
    InstanceNorm1d InstanceNorm2d InstanceNorm3d LocalResponseNorm Dropout Dropout1d Dropout2d
    Dropout3d AlphaDropout ReLU ReLU6 LeakyReLU PReLU ELU SELU CELU GELU SiLU Mish Sigmoid Tanh
    Softplus Softsign Hardtanh Hardswish Hardsigmoid LogSigmoid Tanhshrink Softmax LogSoftmax
    MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d AdaptiveAvgPool1d
    AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d AdaptiveMaxPool3d
    ZeroPad1d ZeroPad2d ConstantPad1d ConstantPad2d Upsample Sequential
    """
LAYERS: tuple[str, ...] = tuple(_LAYER_NAMES.split())
_SKIP_ARGS = {"self", "device", "dtype", "args", "kwargs"}
_BOOL_FROM_PARAM = {"bias", "elementwise_affine", "affine"}


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple | list):
        return [_jsonable(a) for a in v]
    if v is None or isinstance(v, bool | int | float | str):
        return v
    raise TypeError(type(v).__name__)


def _layer_spec(name: str, layer: nn.Module) -> dict[str, Any] | None:
    cls = type(layer)
    if cls.__name__ not in LAYERS or getattr(nn, cls.__name__, None) is not cls:
        return None
    if cls is nn.Sequential:
        inner = _sequential_layers(layer)
        return None if inner is None else {"name": name, "type": "Sequential", "layers": inner}
    kwargs: dict[str, Any] = {}
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.name in _SKIP_ARGS or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if not hasattr(layer, p.name):
            if p.default is p.empty:
                return None
            continue  # not stored (e.g. PReLU's init): the weights restore it
        value = getattr(layer, p.name)
        if p.name in _BOOL_FROM_PARAM and (value is None or isinstance(value, torch.Tensor)):
            value = value is not None
        try:
            kwargs[p.name] = _jsonable(value)
        except TypeError:
            return None
    return {"name": name, "type": cls.__name__, "kwargs": kwargs}


def _sequential_layers(net: nn.Sequential) -> list[dict[str, Any]] | None:
    layers = []
    for name, layer in net.named_children():
        spec = _layer_spec(name, layer)
        if spec is None:
            log.info("layer %s (%s) is not a standard torch layer", name, type(layer).__name__)
            return None
        layers.append(spec)
    return layers


def _tuples(v: Any) -> Any:
    return tuple(_tuples(a) for a in v) if isinstance(v, list) else v


def _build_layers(layers: list[dict[str, Any]]) -> nn.Sequential:
    mods: OrderedDict[str, nn.Module] = OrderedDict()
    for spec in layers:
        kind = spec.get("type")
        if kind not in LAYERS:
            raise ValueError(f"unknown layer type {kind!r} in the architecture spec")
        if kind == "Sequential":
            mods[spec["name"]] = _build_layers(spec["layers"])
        else:
            kwargs = {k: _tuples(v) for k, v in spec.get("kwargs", {}).items()}
            mods[spec["name"]] = getattr(nn, kind)(**kwargs)
    return nn.Sequential(mods)


@register_model("sequential")
def sequential(layers: list[dict[str, Any]]) -> nn.Sequential:
    """An ``nn.Sequential`` rebuilt from its JSON layer list (see :func:`architecture_spec`)."""
    return _build_layers(layers)


def _shapes(net: nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in net.state_dict().items()}


def architecture_spec(net: nn.Module) -> dict[str, Any] | None:
    """The bundle's ``"model"`` entry for ``net``: the factory spec of bayesify's own models, a
    ``"sequential"`` spec for an ``nn.Sequential`` of standard layers, else None."""
    spec = getattr(net, "bayesify_spec", None)
    if spec is not None:
        return spec
    if type(net) is not nn.Sequential:
        return None
    layers = _sequential_layers(net)
    if layers is None:
        return None
    try:
        rebuilt = _build_layers(layers)
    except (TypeError, ValueError) as e:
        log.info("the nn.Sequential cannot be rebuilt from its spec: %s", e)
        return None
    if _shapes(rebuilt) != _shapes(net):
        log.info("the nn.Sequential rebuilt from its spec has other parameter shapes")
        return None
    return {"factory": "sequential", "kwargs": {"layers": layers}}


def net_class_name(net: nn.Module) -> str:
    """``module.QualName`` of the network's class, for messages."""
    return f"{type(net).__module__}.{type(net).__qualname__}"


def net_from_reference(ref: str) -> nn.Module:
    """``"package.module:factory"`` -> ``factory()``, a new network (imports the user's code)."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"--net/net= takes 'package.module:factory' (a function or class returning a new "
            f"network), got {ref!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(
            f"cannot import {module_name!r} for net {ref!r} ({e}); is it on PYTHONPATH?"
        ) from None
    factory = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise ValueError(f"module {module_name!r} has no {attr!r} (net {ref!r})")
        factory = getattr(factory, part)
    if not callable(factory):
        raise ValueError(f"net {ref!r}: {attr!r} is not callable")
    net = factory()
    if not isinstance(net, nn.Module):
        raise ValueError(f"net {ref!r} returned a {type(net).__name__}, not a torch.nn.Module")
    return net
