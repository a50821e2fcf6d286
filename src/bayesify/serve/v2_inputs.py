"""Input tensors of an Open Inference Protocol (v2) request -> the checked rows of a bundle.

Table bundles take one tensor per feature (numbers, or BYTES for a category) and apply the
bundle's preprocessing; they, like every other bundle, also take one tensor ``[N, ...]`` of
encoded numbers. Sizes are checked in Python integers before numpy sees a shape. Every refusal
is an :class:`~bayesify.serve.model.InputError` naming the field. See :mod:`.v2`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bayesify.serve.model import ServedModel
from bayesify.serve.rows import (
    InputError,
    boolean_text,
    names_listed,
    not_a_number,
)
from bayesify.serve.schemas import V2InferRequest

NUMERIC = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
           "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
           "INT64": np.int64, "FP16": np.float16, "FP32": np.float32,
           "FP64": np.float64}  # fmt: skip


def input_metadata(model: ServedModel) -> list[dict[str, Any]]:
    """The model metadata's ``inputs``: one tensor per feature for a table bundle (BYTES for
    a category, FP64 for a number), else one tensor of numbers ``[-1, *input_shape]``."""
    prep = model.predictor.preprocessing
    if prep is not None and prep.features:
        return [{"name": f, "datatype": "BYTES" if f in prep.categories else "FP64",
                 "shape": [-1]} for f in prep.features]  # fmt: skip
    shape = list(model.input_shape) if model.input_shape else [-1]
    return [{"name": "input", "datatype": "FP32", "shape": [-1, *shape]}]


def _bytes_elements(raw: bytes, count: int, loc: list[str | int]) -> list[str]:
    """The binary form of a BYTES tensor: each element a 4-byte little-endian length, then
    that many bytes (UTF-8 text here)."""
    out, at = [], 0
    while at < len(raw):
        if at + 4 > len(raw):
            raise InputError(loc, "BYTES element cut short (a 4-byte length must precede each)")
        size = int.from_bytes(raw[at : at + 4], "little")
        if at + 4 + size > len(raw):
            raise InputError(loc, f"BYTES element of {size} bytes runs past the tensor's data")
        try:
            out.append(raw[at + 4 : at + 4 + size].decode("utf-8"))
        except UnicodeDecodeError:
            raise InputError(loc, f"element {len(out)} is not UTF-8 text") from None
        at += 4 + size
    if len(out) != count:
        raise InputError(loc, f"{len(out)} BYTES elements for {count} rows")
    return out


def _feature_column(model: ServedModel, t: Any, raw: bytes | None, loc: list[str | int]):
    """One feature's input tensor -> its values ``[N]`` (float64, or text for a category)."""
    prep = model.predictor.preprocessing
    category = t.name in prep.categories
    if len(t.shape) not in (1, 2) or (len(t.shape) == 2 and t.shape[1] != 1) or t.shape[0] < 1:
        raise InputError([*loc, "shape"], f"{t.shape}; a feature tensor is [N] or [N, 1]")
    n = t.shape[0]
    if category:
        if t.datatype != "BYTES":
            raise InputError([*loc, "datatype"], f"{t.datatype!r}; feature {t.name!r} is a "
                             f"category: send BYTES, one of {prep.categories[t.name]}")  # fmt: skip
        if raw is not None:
            flat = np.asarray(_bytes_elements(raw, n, [*loc, "data"]), dtype=object)
        else:
            flat = np.asarray(t.data, dtype=object).reshape(-1) if t.data is not None else None
            if flat is None or any(not isinstance(v, str) for v in flat):
                raise InputError([*loc, "data"], "a BYTES tensor's data are strings")
            if len(flat) != n:
                raise InputError([*loc, "data"], f"{len(flat)} values for shape {t.shape}")
        spelled = model.booleans.get(t.name)
        if spelled:
            flat = np.asarray([boolean_text(spelled, v) for v in flat], dtype=object)
        return flat
    if t.datatype not in NUMERIC or t.datatype == "BOOL":
        raise InputError([*loc, "datatype"], f"{t.datatype!r}; feature {t.name!r} is a number: "
                         "send FP32, FP64 or an integer type")  # fmt: skip
    return _numbers(t, raw, n, loc, text=False)


def _numbers(t: Any, raw: bytes | None, size: int, loc: list[str | int], *, text: bool) -> Any:
    """A numeric tensor's ``size`` values, flat float64: from its binary bytes ``raw`` or its
    JSON ``data`` (``text``: numbers written as strings, e.g. ``"NaN"``, are read too)."""
    if raw is not None:
        dtype = np.dtype(NUMERIC[t.datatype])
        if len(raw) != size * dtype.itemsize:
            raise InputError([*loc, "shape"], f"{t.shape} needs {size * dtype.itemsize} bytes "
                             f"of {t.datatype}, got {len(raw)}")  # fmt: skip
        return np.frombuffer(raw, dtype=dtype).astype(np.float64)
    if t.data is None:
        raise InputError([*loc, "data"], "missing (and no binary_data_size parameter)")
    odd = not_a_number(t.data, []) if t.datatype != "BOOL" else None
    if odd is not None and not (text and odd[1] == "a string"):
        raise InputError([*loc, "data", *odd[0]], f"{odd[1]}, not a {t.datatype} number")
    try:
        arr = np.asarray(t.data, dtype=np.float64).reshape(-1)
    except OverflowError:
        raise InputError([*loc, "data"], "number too large for a float64") from None
    except (ValueError, TypeError):
        raise InputError([*loc, "data"], "must be numbers (flat or nested)") from None
    if arr.size != size:
        raise InputError([*loc, "data"], f"{arr.size} values for shape {t.shape} "
                         f"({size} values)")  # fmt: skip
    return arr


def _feature_tensors(model: ServedModel, req: V2InferRequest, binary: bytes) -> np.ndarray:
    """Raw feature values, one tensor per feature -> the checked encoded array, through the
    bundle's preprocessing (the path of ``/v1/predict``)."""
    import pandas as pd

    names = model.predictor.feature_names
    seen = [t.name for t in req.inputs]
    unknown = [t.name for t in req.inputs if t.name not in names]
    if unknown:
        at = seen.index(unknown[0])
        more = f" (nor are {names_listed(unknown[1:])})" if len(unknown) > 1 else ""
        raise InputError(["inputs", at, "name"], f"{unknown[0]!r} is not a feature{more}; send "
                         f"one tensor per feature, named {names_listed(names)}")  # fmt: skip
    for i, t in enumerate(req.inputs):
        if seen.count(t.name) > 1:
            raise InputError(["inputs", i, "name"], f"feature {t.name!r} sent twice")
    missing = [f for f in names if f not in seen]
    if missing:
        raise InputError(["inputs"], f"missing feature tensor(s) {names_listed(missing)}; "
                         f"send one tensor per feature, named {names_listed(names)}")  # fmt: skip
    columns, at, rows = {}, 0, None
    for i, t in enumerate(req.inputs):
        loc: list[str | int] = ["inputs", i]
        raw = None
        size = (t.parameters or {}).get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or size < 0 or at + size > len(binary):
                left = len(binary) - at
                raise InputError(
                    [*loc, "parameters", "binary_data_size"],
                    f"{size}, but {left} bytes are left after the JSON header",
                )
            raw, at = binary[at : at + size], at + size
        columns[t.name] = _feature_column(model, t, raw, loc)
        if rows is not None and len(columns[t.name]) != rows:
            raise InputError([*loc, "shape"], f"{len(columns[t.name])} rows; the other feature "
                             f"tensors have {rows}")  # fmt: skip
        rows = len(columns[t.name])
    if at != len(binary):
        raise InputError(["inputs"], f"{len(binary) - at} bytes after the JSON header belong to "
                         "no input tensor")  # fmt: skip
    return model.encode_frame(pd.DataFrame(columns)[names], ["inputs"])


#: an input tensor's parameters taken (``content_type``: MLServer's codecs; no effect here)
INPUT_PARAMETERS = ("binary_data_size", "content_type")


def input_array(model: ServedModel, req: V2InferRequest, binary: bytes) -> np.ndarray:
    """The request's input tensors -> the checked rows ``[N, *input_shape]`` (encoded)."""
    for i, t in enumerate(req.inputs):
        unknown = [k for k in t.parameters or {} if k not in INPUT_PARAMETERS]
        if unknown:
            valid = ", ".join(INPUT_PARAMETERS)
            msg = f"unknown parameter(s) {names_listed(unknown)}; valid: {valid}"
            raise InputError(["inputs", i, "parameters"], msg)
    names = model.predictor.feature_names
    if names and any(t.name in names for t in req.inputs):  # raw feature values
        return _feature_tensors(model, req, binary)
    if len(req.inputs) != 1:
        raise InputError(["inputs"], f"exactly one input tensor, got {len(req.inputs)}")
    t = req.inputs[0]
    loc: list[str | int] = ["inputs", 0]
    if t.datatype not in NUMERIC:
        raise InputError([*loc, "datatype"], f"{t.datatype!r}; valid: {', '.join(NUMERIC)}")
    if not t.shape or any(d < 1 for d in t.shape):
        raise InputError([*loc, "shape"], f"{t.shape}; dimensions must be >= 1, batch first")
    size = math.prod(t.shape)  # Python integers: a numpy product wraps past 2**63
    params = t.parameters or {}
    if "binary_data_size" in params:
        n_bytes = params["binary_data_size"]
        if not isinstance(n_bytes, int) or n_bytes != len(binary):
            msg = f"{n_bytes}, but {len(binary)} bytes follow the JSON header"
            raise InputError([*loc, "parameters", "binary_data_size"], msg)
    raw = binary if "binary_data_size" in params else None
    arr = _numbers(t, raw, size, loc, text=True)
    return model.check_encoded(model.check_array(arr.reshape(t.shape), loc), loc)


def check_size(req: V2InferRequest, body_bytes: int, max_rows: int) -> None:
    """Each input's shape against the row limit and against what a body of ``body_bytes``
    can hold (at least one byte per value), in Python integers, before numpy sees it."""
    for i, t in enumerate(req.inputs):
        if not t.shape:
            continue
        loc: list[str | int] = ["inputs", i, "shape"]
        if t.shape[0] > max_rows:
            raise InputError(loc, f"{t.shape[0]} rows; at most {max_rows} per request")
        if (size := math.prod(t.shape)) > body_bytes:
            raise InputError(loc, f"{t.shape} is {size} values, more than a {body_bytes}-byte "
                             "body holds")  # fmt: skip
