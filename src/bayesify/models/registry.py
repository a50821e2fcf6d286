"""Factories by name, so that bundles can rebuild the network they were saved from."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from torch import nn

MODELS: dict[str, Callable[..., nn.Module]] = {}


def register_model(name: str) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Register a factory; the networks it builds carry ``bayesify_spec`` = name + arguments."""

    def wrap(factory: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        sig = inspect.signature(factory)

        @functools.wraps(factory)
        def build(*args: Any, **kwargs: Any) -> nn.Module:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            net = factory(*args, **kwargs)
            kw = {
                k: (list(v) if isinstance(v, tuple) else getattr(v, "value", v))
                for k, v in bound.arguments.items()
            }
            net.bayesify_spec = {"factory": name, "kwargs": kw}
            return net

        MODELS[name] = build
        return build

    return wrap


def build_model(spec: dict[str, Any]) -> nn.Module:
    """Rebuild a network from a ``bayesify_spec``."""
    name = spec.get("factory")
    if name not in MODELS:
        raise ValueError(f"unknown model factory {name!r}; valid: {', '.join(sorted(MODELS))}")
    return MODELS[name](**spec.get("kwargs", {}))
