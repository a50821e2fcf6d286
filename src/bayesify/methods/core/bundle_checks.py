"""A bundle bounded by what it is, before any real tensor is allocated.

:func:`bayesify.methods.registry.load` builds the network its ``config.json`` describes on the
meta device (shapes without memory) inside :func:`counted_build`, then :func:`check_bundle`
compares every tensor of that network, buffers included, with the weights file's header and
bounds what the real build will cost. Each refusal is one :class:`~bayesify.io.BundleError`
line. The limits (:class:`BundleLimits`) are read from the environment:

* ``BAYESIFY_MAX_LAYERS`` (1,000): modules holding parameters or buffers of their own, and the
  entries of a ``"sequential"`` layer list;
* ``BAYESIFY_MAX_PARAMETERS`` (10^9): numbers in the network's parameters;
* ``BAYESIFY_MAX_BUFFER_NUMBERS`` (10^9): numbers in its buffers (posterior factors, SWAG's
  moments, batch-norm statistics and banks, ...).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.nn.modules import module as torch_module

from bayesify.io import BundleError

#: safetensors dtype codes -> torch names, for messages
_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
           "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
           "BOOL": "bool", "C64": "complex64"}  # fmt: skip
Specs = Mapping[str, tuple[str, tuple[int, ...]]]


@dataclass(frozen=True)
class BundleLimits:
    """The most a bundle may ask the build for; ``from_env`` reads each from its variable."""

    layers: int = 1_000
    parameters: int = 10**9
    buffer_numbers: int = 10**9

    ENV: ClassVar[dict[str, str]] = {
        "layers": "BAYESIFY_MAX_LAYERS",
        "parameters": "BAYESIFY_MAX_PARAMETERS",
        "buffer_numbers": "BAYESIFY_MAX_BUFFER_NUMBERS",
    }

    @classmethod
    def from_env(cls) -> BundleLimits:
        """The defaults, each replaced by its environment variable where it is set."""
        values: dict[str, int] = {}
        for field, var in cls.ENV.items():
            raw = os.environ.get(var)
            if raw is None or not raw.strip():
                continue
            try:
                values[field] = int(raw.strip().replace("_", ""))
            except ValueError:
                values[field] = 0
            if values[field] < 1:
                raise BundleError(f"{var} must be a positive whole number, got {raw!r}")
        return cls(**values)

    def refuse(self, path: str | Path, field: str, said: str) -> BundleError:
        """The one line refusing a bundle over the limit ``field`` (``said``: by how much)."""
        var, unit = self.ENV[field], field.replace("_", " ")
        return BundleError(
            f"bundle {path}: {said}, more than the limit of {getattr(self, field):,} {unit}; "
            f"if you trust this bundle, raise the limit with {var}=<number>"
        )


def check_spec(path: str | Path, model: Any, limits: BundleLimits) -> None:
    """Refuse a ``"sequential"`` model spec with more entries than ``limits.layers`` before
    one layer of it is built (the list is counted, nested lists included)."""
    if not isinstance(model, dict) or model.get("factory") != "sequential":
        return
    kwargs = model.get("kwargs")
    layers = kwargs.get("layers") if isinstance(kwargs, dict) else None
    count, todo = 0, [layers]
    while todo and count <= limits.layers:
        entries = todo.pop()
        if not isinstance(entries, list):
            continue  # malformed: the build says how
        count += len(entries)
        todo.extend(e.get("layers") for e in entries if isinstance(e, dict))
    if count > limits.layers:
        raise limits.refuse(path, "layers", f"its config.json lists {count:,} layers")


_counting = threading.local()  # this thread's build: the modules seen, the limit, the bundle


def _seen(module: nn.Module, name: str, value: Any) -> None:
    """Global registration hook: count the modules of this thread's build that hold tensors."""
    state = getattr(_counting, "state", None)
    if state is None:
        return
    seen, limits, path = state
    seen.add(id(module))
    if len(seen) > limits.layers:
        raise limits.refuse(path, "layers", f"its network has at least {len(seen):,} layers")


@contextlib.contextmanager
def counted_build(path: str | Path, limits: BundleLimits) -> Iterator[None]:
    """While a network is built in this thread, refuse it as soon as more than
    ``limits.layers`` of its modules have registered a parameter or buffer."""
    outer = getattr(_counting, "state", None)
    _counting.state = (set(), limits, path)
    handles = [torch_module.register_module_parameter_registration_hook(_seen),
               torch_module.register_module_buffer_registration_hook(_seen)]  # fmt: skip
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        _counting.state = outer


def tensor_layers(net: nn.Module) -> int:
    """Modules of ``net`` holding parameters or buffers of their own."""
    return sum(1 for m in net.modules() if m._parameters or m._buffers)


def check_members(path: str | Path, config: Any, net: nn.Module, limits: BundleLimits) -> None:
    """Refuse an ensemble whose members times ``net``'s layers exceed the limit, before the
    members are copied (copies register nothing a build could count)."""
    members = config.get("members") if isinstance(config, dict) else None
    if isinstance(members, int) and not isinstance(members, bool) and members > 1:
        each = max(tensor_layers(net), 1)
        if members * each > limits.layers:
            said = f"its {members:,} members of {each:,} layers make {members * each:,} layers"
            raise limits.refuse(path, "layers", said)


def _kind(code: str) -> str:
    if code == "BOOL":
        return "bool"
    return {"F": "floating point", "B": "floating point", "C": "complex"}.get(code[0], "integer")


def _torch_kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_floating_point:
        return "floating point"
    return "complex" if dtype.is_complex else "integer"


def _placeholder_fits(expected: tuple[int, ...], found: tuple[int, ...]) -> bool:
    """A buffer built empty is sized by the data it holds (a statistics bank ``[0, C]``, SWAG's
    moments ``[0]``): a flat one takes any shape, another keeps its rank and non-zero sizes."""
    if expected == (0,):
        return True
    if len(found) != len(expected):
        return False
    return all(e in (0, f) for e, f in zip(expected, found, strict=True))


def check_fits(path: str | Path, net: nn.Module, specs: Specs) -> None:
    """Every tensor of ``net`` (parameters and buffers) against the weights file's header:
    the same names, the same shapes (empty buffers: :func:`_placeholder_fits`), the same kind
    of dtype (floating point, integer, bool, complex)."""
    state = net.state_dict(keep_vars=True)
    missing = [k for k in state if k not in specs]
    unexpected = [k for k in specs if k not in state]
    if missing or unexpected:
        raise BundleError(
            f"bundle {path} does not fit the network: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    params = {k for k, _ in net.named_parameters()}
    for k, value in state.items():
        code, shape = specs[k]
        wanted = tuple(value.shape)
        if _kind(code) != _torch_kind(value.dtype):
            whose = "weights are" if k in params else "buffer is"
            raise BundleError(
                f"bundle {path}: tensor {k!r} is {_DTYPES.get(code, code)} in the weights file; "
                f"the network's {whose} {_torch_kind(value.dtype)} "
                f"({str(value.dtype).removeprefix('torch.')})"
            )
        fits = shape == wanted or (value.numel() == 0 and _placeholder_fits(wanted, shape))
        if not fits:
            raise BundleError(
                f"bundle {path}: tensor {k!r} has shape {list(shape)} in the weights file; the "
                f"network its config.json describes needs {list(wanted)}"
            )


def check_bundle(path: str | Path, net: nn.Module, specs: Specs, limits: BundleLimits) -> None:
    """``net`` (built on the meta device) fits the header, and what the real build will hold
    (the header's sizes for buffers sized by their data) is within ``limits``."""
    layers = tensor_layers(net)
    if layers > limits.layers:
        raise limits.refuse(path, "layers", f"its network has {layers:,} layers")
    check_fits(path, net, specs)
    params = sum(p.numel() for p in net.parameters())
    if params > limits.parameters:
        raise limits.refuse(path, "parameters", f"its network holds {params:,} parameters")
    buffers = sum(
        math.prod(specs[k][1]) if k in specs else b.numel() for k, b in net.named_buffers()
    )
    if buffers > limits.buffer_numbers:
        said = f"its network holds {buffers:,} numbers in buffers"
        raise limits.refuse(path, "buffer_numbers", said)


def resize_like(module: nn.Module, state: Mapping[str, Tensor]) -> None:
    """Give buffers whose size depends on data (e.g. statistics banks) the saved shapes."""
    for name, buf in list(module.named_buffers()):
        if name in state and state[name].shape != buf.shape:
            owner_name, _, attr = name.rpartition(".")
            owner = module.get_submodule(owner_name) if owner_name else module
            setattr(owner, attr, torch.empty_like(state[name], device=buf.device, dtype=buf.dtype))
