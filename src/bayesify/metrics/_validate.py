"""Input checks shared by the metric functions.

Every helper raises ``ValueError`` naming the offending argument and what is wrong with it, so a
bad call fails at the boundary with a readable message instead of deep inside PyTorch (or, worse,
returning silently wrong numbers). Nothing here uses ``assert``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bayesify.options import Reduction, parse_option, shown

__all__ = [
    "Reduction",
    "as_float",
    "as_labels",
    "check_finite",
    "check_fraction",
    "check_int",
    "check_ndim",
    "check_nonempty",
    "check_positive",
    "check_probs",
    "check_same_shape",
    "expand_param",
    "out_dtype",
    "reduce",
]


def reduce(values: Tensor, reduction: str | Reduction, dtype: torch.dtype) -> Tensor:
    """Apply ``reduction`` to per-point ``values`` ``[N]`` and cast to ``dtype``."""
    red = parse_option(Reduction, reduction, option="reduction")
    if red is Reduction.MEAN:
        values = values.mean()
    elif red is Reduction.SUM:
        values = values.sum()
    return values.to(dtype)


def out_dtype(*tensors: Tensor) -> torch.dtype:
    """The float dtype results are returned in.

    As in PyTorch's type promotion, tensors with dimensions decide: the promoted dtype of the
    floating ones among them. 0-dim tensors (scalars such as a constant ``std``) only decide when
    no dimensioned tensor is floating, so a float64 scalar does not upcast float32 data.
    """
    for group in ([t for t in tensors if t.ndim > 0], [t for t in tensors if t.ndim == 0]):
        floats = [t.dtype for t in group if t.is_floating_point()]
        if floats:
            dtype = floats[0]
            for d in floats[1:]:
                dtype = torch.promote_types(dtype, d)
            return dtype
    return torch.get_default_dtype()


def as_float(x: Any, name: str, *, allow_nonfinite: bool = False) -> Tensor:
    """``x`` as a floating tensor.

    Tensors and arrays keep a float dtype; integer ones become ``torch.get_default_dtype()``.
    Python numbers and (nested) sequences are converted in float64, since they are double
    precision (``torch.as_tensor(0.3)`` would round them to float32). Rejects complex and
    boolean inputs, and NaN / inf unless ``allow_nonfinite``.
    """
    try:
        t = torch.as_tensor(x)
        if not isinstance(x, Tensor | np.ndarray | np.generic) and not (
            t.dtype == torch.bool or t.is_complex()
        ):
            t = torch.as_tensor(x, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"{name} could not be converted to a tensor: {err}") from None
    if t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name} must be real-valued numbers, got dtype {t.dtype}")
    if not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    if not allow_nonfinite:
        check_finite(t, name)
    return t


def check_finite(t: Tensor, name: str) -> None:
    """Raise if ``t`` contains NaN or +-inf."""
    if torch.isnan(t).any():
        raise ValueError(f"{name} contains NaN")
    if torch.isinf(t).any():
        raise ValueError(f"{name} contains inf")


def check_ndim(t: Tensor, ndim: int, name: str, shape_hint: str) -> None:
    """Raise unless ``t`` has exactly ``ndim`` dimensions (``shape_hint`` e.g. ``"[T, N]"``)."""
    if t.ndim != ndim:
        raise ValueError(f"{name} must have shape {shape_hint}, got shape {tuple(t.shape)}")


def check_nonempty(t: Tensor, name: str) -> None:
    """Raise if ``t`` has no elements."""
    if t.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(t.shape)})")


def check_same_shape(a: Tensor, b: Tensor, name_a: str, name_b: str) -> None:
    """Raise unless ``a`` and ``b`` have identical shapes."""
    if a.shape != b.shape:
        raise ValueError(
            f"{name_a} and {name_b} must have the same shape, "
            f"got {tuple(a.shape)} and {tuple(b.shape)}"
        )


def check_positive(t: Tensor, name: str, *, allow_zero: bool = False) -> None:
    """Raise unless every element of ``t`` is > 0 (or >= 0 with ``allow_zero``)."""
    bad = t < 0 if allow_zero else t <= 0
    if bad.any():
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound} everywhere, got min {t.min().item():.6g}")


def expand_param(p: Tensor, target_shape: torch.Size, name: str, allowed: str) -> Tensor:
    """Broadcast a scale parameter to ``target_shape``.

    ``p`` may be a scalar, the trailing ``[N]`` shape, or ``target_shape`` itself; anything else
    raises naming ``allowed`` (e.g. ``"a scalar, [N] or [T, N]"``).
    """
    shape = tuple(p.shape)
    ok = p.ndim == 0 or shape == tuple(target_shape) or shape == tuple(target_shape[-1:])
    if not ok:
        raise ValueError(
            f"{name} must be {allowed} matching shape {tuple(target_shape)}, got shape {shape}"
        )
    return p.expand(target_shape)


def _sum_tolerance(dtype: torch.dtype) -> float:
    # Generous enough for float32 softmax outputs over many classes, tight enough to catch
    # logits or unnormalised scores passed by mistake.
    return 1e-2 if torch.finfo(dtype).bits <= 16 else 1e-4


def check_probs(p: Tensor, name: str) -> None:
    """Raise unless ``p`` holds probability vectors along its last axis.

    Checks: at least one dimension with at least one class, entries in ``[0, 1]`` and each
    vector summing to 1 within a dtype-dependent tolerance (1e-4; 1e-2 for 16-bit floats).
    """
    if p.ndim == 0 or p.shape[-1] == 0:
        raise ValueError(f"{name} must have a class axis last ([..., C], C >= 1), got {p.shape}")
    if (p < 0).any() or (p > 1).any():
        raise ValueError(
            f"{name} must be probabilities in [0, 1], got range "
            f"[{p.min().item():.6g}, {p.max().item():.6g}]"
        )
    sums = p.to(torch.float64).sum(-1)
    dev = (sums - 1).abs()
    if dev.numel() and dev.max().item() > _sum_tolerance(p.dtype):
        worst = sums.flatten()[dev.flatten().argmax()].item()
        raise ValueError(
            f"{name} must sum to 1 over the last (class) axis, found a row summing to {worst:.6g}"
        )


def as_labels(x: Any, n_classes: int, name: str = "labels") -> Tensor:
    """Integer class labels ``[N]`` as int64 in ``[0, n_classes)``.

    Float tensors are accepted only if every value is integral.
    """
    try:
        t = torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"{name} could not be converted to a tensor: {err}") from None
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name} must be integer class indices, got dtype {t.dtype}")
    if t.is_floating_point():
        check_finite(t, name)
        if (t != t.round()).any():
            raise ValueError(f"{name} must be integer class indices, got non-integral values")
    t = t.to(torch.int64)
    check_ndim(t, 1, name, "[N]")
    if t.numel() and (t.min() < 0 or t.max() >= n_classes):
        raise ValueError(
            f"{name} must lie in [0, {n_classes}) for C={n_classes} classes, got range "
            f"[{t.min().item()}, {t.max().item()}]"
        )
    return t


def check_fraction(
    value: float, name: str, *, low_open: bool = False, high_open: bool = False
) -> float:
    """Raise unless ``value`` is a finite number in [0, 1] (ends open as requested)."""
    v = float(value)
    lo_ok = v > 0 if low_open else v >= 0
    hi_ok = v < 1 if high_open else v <= 1
    if not (math.isfinite(v) and lo_ok and hi_ok):
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        raise ValueError(f"{name} must be in {lo}0, 1{hi}, got {shown(value)}")
    return v


def check_int(value: Any, name: str, minimum: int) -> int:
    """Raise unless ``value`` is an int (not bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {shown(value)}")
    return value
