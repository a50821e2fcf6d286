"""The Open Inference Protocol (v2) REST endpoints used by KServe, Seldon and Triton clients.

Input tensors (one per feature for a table bundle, else one tensor ``[N, *input_shape]``; JSON
``data`` or the binary tensor extension; see below) -> named output tensors per row: the prediction
(``mean`` / ``probabilities``, ``label`` and ``class_index``), the uncertainty figures
(``std``, ``epistemic_variance``, ``aleatoric_variance``, ``entropy``, ``mutual_information``,
``expected_entropy``), intervals or prediction sets where the predictor gives them, ``defer``,
``defer_score``, ``defer_threshold`` with a deferral policy, ``samples_used``, and
``request_id`` (BYTES, one per row: ``<server id>-<row>``). Outputs are returned as JSON data
(a client asking for binary outputs gets JSON, which the protocol allows). Request parameter
``samples`` sets T, ``seed`` the draws (the request then runs in a pass of its own). Errors are
``{"error": message}``.

Bundles trained on a table take their rows as raw feature values, one input tensor per
feature named as the feature (as MLServer's pandas codec sends a DataFrame's columns): shape
``[N]`` or ``[N, 1]``, a numeric datatype for a number feature, ``BYTES`` (the protocol's
string type, JSON strings or the binary length-prefixed form) for a category feature. The
server applies the bundle's preprocessing, exactly as ``/v1/predict`` and ``bayesify predict``
do: unknown categories, missing values and numbers outside the bundle's bounds are 422s naming
the row and column; the model metadata lists these inputs. Such a bundle also still takes one
tensor ``[N, F]`` of its encoded columns (one column per number feature, one 0/1 column per
category ``name=category``, in the order of ``parameters.input_columns``), checked: every
category group must hold exactly one 1 among 0s. Other bundles take one tensor of numbers
``[N, *input_shape]``. Class labels come back as ``label`` in the type the classes had in
training: ``INT64`` for whole-number classes, ``BYTES`` for text.

Every model route also exists per version, ``/v2/models/{name}/versions/{version}/...`` (without
it: the newest version served), and the model repository extension lists the models of the
server's folder (``POST /v2/repository/index``) and loads or unloads one while the server runs
(``POST /v2/repository/models/{name}/load|unload``), as Triton's does.

Every inference is recorded for feedback as ``/v1/predict`` is, under ids the server makes:
the ``request_id`` outputs. The response ``id`` is the request's ``id`` when the client gave one
(at most :data:`MAX_ID_CHARS` characters), else the server's; ``POST /v1/feedback`` takes the
rows' ``request_id`` outputs, or for a one-row request the response ``id`` itself, while no
other remembered request carried the same client ``id`` (a reused one is refused as ambiguous:
no client can replace another's row or score it by reusing its id).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from bayesify.serve.model import InputError, ServedModel, not_a_number
from bayesify.serve.repository import Entry, Repository, UnknownModel
from bayesify.serve.schemas import (
    V2Error,
    V2InferRequest,
    V2InferResponse,
    V2ModelMetadata,
    json_body,
)

NUMERIC = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
           "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
           "INT64": np.int64, "FP16": np.float16, "FP32": np.float32,
           "FP64": np.float64}  # fmt: skip
HEADER_LENGTH = "inference-header-content-length"
#: longest request ``id`` taken (ids name rows in ``/v1/feedback``)
MAX_ID_CHARS = 128


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status)


def _datatype(arr: np.ndarray) -> tuple[str, list]:
    """Protocol datatype and flat JSON data of one output column."""
    if arr.dtype == object or arr.dtype.kind in "US":
        flat = [v if isinstance(v, str) else json.dumps(_plain(v)) for v in arr.reshape(-1)]
        return "BYTES", flat
    if arr.dtype == np.bool_:
        return "BOOL", arr.reshape(-1).tolist()
    if arr.dtype.kind in "iu":
        return "INT64", arr.astype(np.int64).reshape(-1).tolist()
    return "FP64", arr.astype(np.float64).reshape(-1).tolist()


def _plain(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v.item() if isinstance(v, np.generic) else v


def output_tensors(model: ServedModel, columns: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """The named output tensors of a pass's columns (``samples`` left out)."""
    out = []
    for name, col in columns.items():
        if name == "samples":
            continue
        arr = np.asarray(col) if not isinstance(col, np.ndarray) else col
        if name == "label" and arr.dtype != object and not _typed_labels(model):
            arr = arr.astype(object)
        datatype, data = _datatype(arr)
        shape = list(arr.shape) if datatype != "BYTES" or arr.ndim == 1 else [len(arr)]
        if datatype == "BYTES" and arr.ndim > 1:  # ragged rows (sets) go one JSON per row
            data = [json.dumps(_plain(row)) for row in arr]
        out.append({"name": name, "shape": shape, "datatype": datatype, "data": data})
        if name == "label" and model.class_names:
            code = {c: i for i, c in enumerate(model.predictor.class_labels)}
            index = np.asarray([code[_plain(v)] for v in arr], dtype=np.int64)
            out.append({"name": "class_index", "shape": [len(index)], "datatype": "INT64",
                        "data": index.tolist()})  # fmt: skip
    return out


#: the protocol datatype of typed class labels (``Preprocessing.label_type``)
LABEL_DATATYPES = {"int": "INT64", "float": "FP64", "bool": "BOOL"}


def _typed_labels(model: ServedModel) -> bool:
    prep = model.predictor.preprocessing
    return prep is not None and prep.label_type in LABEL_DATATYPES


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
            return np.asarray(_bytes_elements(raw, n, [*loc, "data"]), dtype=object)
        flat = np.asarray(t.data, dtype=object).reshape(-1) if t.data is not None else None
        if flat is None or any(not isinstance(v, str) for v in flat):
            raise InputError([*loc, "data"], "a BYTES tensor's data are strings")
        if len(flat) != n:
            raise InputError([*loc, "data"], f"{len(flat)} values for shape {t.shape}")
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
    for i, t in enumerate(req.inputs):
        if t.name not in names:
            raise InputError(["inputs", i, "name"], f"{t.name!r} is not a feature; send one "
                             f"tensor per feature, named {names}")  # fmt: skip
        if seen.count(t.name) > 1:
            raise InputError(["inputs", i, "name"], f"feature {t.name!r} sent twice")
    missing = [f for f in names if f not in seen]
    if missing:
        raise InputError(["inputs"], f"missing feature tensor(s) {missing}; send one tensor "
                         f"per feature, named {names}")  # fmt: skip
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


def _input_array(model: ServedModel, req: V2InferRequest, binary: bytes) -> np.ndarray:
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


def _check_size(req: V2InferRequest, body_bytes: int, max_rows: int) -> None:
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


def add_v2_routes(app: FastAPI, repo: Repository) -> None:
    """Register the v2 endpoints on ``app`` (which holds ``run_rows`` and ``check_limits``) for
    the models of ``repo``."""
    errors = {400: {"model": V2Error}, 404: {"model": V2Error}, 422: {"model": V2Error}}

    def find(request: Request, name: str, version: str | None) -> Entry | JSONResponse:
        """The entry named, or the 404 that names what is served."""
        try:
            return repo.find(name, version, request.scope)
        except UnknownModel as e:
            return _error(str(e), 404)

    @app.get("/v2/health/live")
    async def live() -> dict[str, bool]:
        return {"live": True}

    @app.get("/v2/health/ready")
    async def ready() -> dict[str, bool]:
        return {"ready": True}

    @app.get("/v2")
    async def server_metadata() -> dict[str, Any]:
        return {"name": "bayesify", "version": "1",
                "extensions": ["binary_tensor_data", "model_repository"]}  # fmt: skip

    @app.get("/v2/models/{name}", response_model=V2ModelMetadata, responses=errors)
    async def model_metadata(request: Request, name: str) -> Response:
        return await version_metadata(request, name, None)

    @app.get("/v2/models/{name}/versions/{version}", response_model=V2ModelMetadata,
             responses=errors)  # fmt: skip
    async def version_metadata(request: Request, name: str, version: str | None) -> Response:
        if isinstance(entry := find(request, name, version), JSONResponse):
            return entry
        model = entry.model
        fields = model.card().get("fields", [])
        outs = [{"name": f, "datatype": "FP64", "shape": [-1]} for f in fields if f != "samples"]
        prep = model.predictor.preprocessing
        for o in outs:
            if o["name"] in ("label", "prediction_set"):  # a name; a JSON list of names per row
                o["datatype"] = "BYTES"
            if o["name"] == "label" and _typed_labels(model):
                o["datatype"] = LABEL_DATATYPES[prep.label_type]
            if o["name"] == "probabilities":
                o["shape"] = [-1, len(model.class_names or []) or -1]
        if model.class_names and "label" in fields:
            outs.append({"name": "class_index", "datatype": "INT64", "shape": [-1]})
        if model.policy is not None:
            outs += [{"name": "defer", "datatype": "BOOL", "shape": [-1]},
                     {"name": "defer_score", "datatype": "FP64", "shape": [-1]},
                     {"name": "defer_threshold", "datatype": "FP64", "shape": [-1]}]  # fmt: skip
            if model.policy.decision is not None:  # samples its sequential decision used
                outs.append({"name": "defer_samples", "datatype": "INT64", "shape": [-1]})
        outs += [{"name": "samples_used", "datatype": "INT64", "shape": [-1]},
                 {"name": "request_id", "datatype": "BYTES", "shape": [-1]}]  # fmt: skip
        meta = {
            "name": model.name, "versions": [str(v) for v in repo.loaded[model.name]],
            "platform": "bayesify", "inputs": input_metadata(model),
            "outputs": outs,
        }  # fmt: skip
        if prep is not None and prep.features is not None:
            meta["parameters"] = {"input_columns": prep.encoded_names}
        return JSONResponse(meta)

    @app.get("/v2/models/{name}/ready", responses=errors)
    async def model_ready(request: Request, name: str) -> Response:
        return await version_ready(request, name, None)

    @app.get("/v2/models/{name}/versions/{version}/ready", responses=errors)
    async def version_ready(request: Request, name: str, version: str | None) -> Response:
        if isinstance(entry := find(request, name, version), JSONResponse):
            return entry
        return JSONResponse({"name": entry.name, "version": str(entry.version), "ready": True})

    infer_doc = {"response_model": V2InferResponse, "responses": errors,
                 "openapi_extra": json_body(V2InferRequest)}  # fmt: skip

    @app.post("/v2/models/{name}/infer", **infer_doc)
    async def infer(name: str, request: Request) -> Response:
        """Inference: one input tensor in, the prediction and its uncertainty as named outputs
        (``samples`` request parameter: T), by the newest version served."""
        return await version_infer(name, None, request)

    @app.post("/v2/models/{name}/versions/{version}/infer", **infer_doc)
    async def version_infer(name: str, version: str | None, request: Request) -> Response:
        """Inference by one version of the model."""
        body = await request.body()
        # no await from here to the rows queued (see Repository.unload)
        if isinstance(entry := find(request, name, version), JSONResponse):
            return entry
        model = entry.model
        header = request.headers.get(HEADER_LENGTH)
        binary = b""
        if header is not None:
            if not header.isdigit() or int(header) > len(body):
                return _error(f"Inference-Header-Content-Length {header!r} does not fit the "
                              f"{len(body)}-byte body", 422)  # fmt: skip
            body, binary = body[: int(header)], body[int(header) :]
        try:
            req = V2InferRequest.model_validate_json(body)
        except ValidationError as e:
            text = "; ".join(f"{'.'.join(map(str, d['loc']))}: {d['msg']}" for d in e.errors())
            return _error(text, 422)
        if req.id is not None and len(req.id) > MAX_ID_CHARS:
            return _error(f"id: at most {MAX_ID_CHARS} characters, got {len(req.id)}", 422)
        samples = (req.parameters or {}).get("samples")
        if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int)
                                    or samples < 1):  # fmt: skip
            return _error(f"parameters.samples: a positive integer, got {samples!r}", 422)
        seed = (req.parameters or {}).get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                                 or not 0 <= seed < 2**63):  # fmt: skip
            return _error(f"parameters.seed: an integer >= 0, got {seed!r}", 422)
        try:
            _check_size(req, len(body) + len(binary), app.state.settings.max_rows)
            arr = _input_array(model, req, binary)
        except InputError as e:
            return _error(f"{'.'.join(map(str, e.loc))}: {e.message}", 422)
        limits = app.state.check_limits(len(arr), samples, ["inputs", 0, "shape"])
        if limits is not None:
            detail = json.loads(limits.body)["detail"][0]
            return _error(f"{'.'.join(map(str, detail['loc']))}: {detail['msg']}", 422)
        try:
            answer = await app.state.run_rows(entry, arr, samples, seed=seed)
        except ValueError as e:
            return _error(f"inputs.0: {e}", 422)
        columns = dict(answer.columns)
        rid, row_ids = app.state.record(entry, answer, 0.9, req.id)  # feedback, as /v1/predict
        columns["request_id"] = np.asarray(row_ids, dtype=object)
        outputs = output_tensors(model, columns)
        if req.outputs:
            have = {o["name"]: o for o in outputs}
            missing = [o.name for o in req.outputs if o.name not in have]
            if missing:
                return _error(f"outputs: unknown output(s) {missing}; valid: {sorted(have)}", 400)
            outputs = [have[o.name] for o in req.outputs]
        out = {"model_name": model.name, "model_version": str(entry.version),
               "id": req.id or rid, "outputs": outputs}  # fmt: skip
        if answer.warnings:
            out["parameters"] = {"warnings": answer.warnings}
        return JSONResponse(out)

    add_repository_routes(app, repo)


async def _json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object, ``{}`` for an empty body (a ``ValueError`` otherwise)."""
    body = await request.body()
    if not body.strip():
        return {}
    try:
        value = json.loads(body)
    except ValueError:
        raise ValueError("the body must be a JSON object") from None
    if not isinstance(value, dict):
        raise ValueError("the body must be a JSON object")
    return value


def add_repository_routes(app: FastAPI, repo: Repository) -> None:
    """The model repository extension: the index, load and unload."""
    errors = {400: {"model": V2Error}, 404: {"model": V2Error}}

    @app.post("/v2/repository/index", responses=errors)
    async def repository_index(request: Request) -> Response:
        """Every model version in the server's folder or loaded: ``name``, ``version``,
        ``state`` (``READY`` or ``UNAVAILABLE``) and, when not loaded, ``reason``. Body
        ``{"ready": true}`` lists only the loaded ones."""
        try:
            ready = (await _json_body(request)).get("ready", False)
        except ValueError as e:
            return _error(str(e), 400)
        rows = repo.index()
        return JSONResponse([r for r in rows if r["state"] == "READY"] if ready is True else rows)

    @app.post("/v2/repository/models/{name}/load", responses=errors)
    async def load(name: str, request: Request) -> Response:
        """Load every version of ``name`` found in the server's folder now and not loaded yet
        (a bundle copied there after start-up included); loaded versions stay as they are."""
        try:
            params = (await _json_body(request)).get("parameters") or {}
        except ValueError as e:
            return _error(str(e), 400)
        if params:
            return _error(f"parameters {sorted(params)}: not taken; bayesify loads bundles from "
                          "its folder as they are there", 400)  # fmt: skip
        try:
            await repo.load(name)
        except UnknownModel as e:
            return _error(str(e), 404)
        except ValueError as e:
            return _error(f"failed to load {e}", 400)
        return JSONResponse({})

    @app.post("/v2/repository/models/{name}/unload", responses=errors)
    async def unload(name: str) -> Response:
        """Stop serving every version of ``name``; requests already queued are answered."""
        try:
            await repo.unload(name)
        except UnknownModel as e:
            return _error(str(e), 404)
        return JSONResponse({})
