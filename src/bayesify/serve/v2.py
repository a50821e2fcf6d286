"""The Open Inference Protocol (v2) REST endpoints used by KServe, Seldon and Triton clients.

Input tensors (one per feature for a table bundle, else one tensor ``[N, *input_shape]``; JSON
``data`` or the binary tensor extension; see below) -> named output tensors per row: the prediction
(``mean`` / ``probabilities``, ``label`` and ``class_index``), the uncertainty figures
(``std``, ``epistemic_variance``, ``aleatoric_variance``, ``entropy``, ``mutual_information``,
``expected_entropy``), intervals or prediction sets where the predictor gives them, ``defer``,
``defer_score``, ``defer_threshold`` with a deferral policy, ``samples_used``, and
``request_id`` (BYTES, one per row: ``<server id>-<row>``). Outputs are returned as JSON data
(a client asking for binary outputs gets JSON, which the protocol allows). Request parameter
``samples`` sets T, or ``"adaptive"`` with ``tol``, ``start``, ``max_samples`` (as ``/v1/predict``
takes them), ``seed`` the draws (the request then runs in a pass of its own), ``scores`` OOD
scores by name, comma-separated (``"energy,mahalanobis"``: an output ``ood_<name>`` each, higher
= more likely out of distribution); an unknown
parameter is refused, the protocol's own (``binary_data_output``, ``content_type``, ...) are taken
and change nothing. Errors are ``{"error": message}``.

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
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from bayesify.serve.model import InputError, ServedModel
from bayesify.serve.repository import Entry, Repository, UnknownModel
from bayesify.serve.rows import names_listed
from bayesify.serve.sampling import ADAPTIVE_FIELDS, requested_sampling
from bayesify.serve.schemas import (
    V2Error,
    V2InferRequest,
    V2InferResponse,
    V2ModelMetadata,
    json_body,
)
from bayesify.serve.v2_inputs import check_size, input_array, input_metadata
from bayesify.serve.v2_repository import add_repository_routes

HEADER_LENGTH = "inference-header-content-length"
#: longest request ``id`` taken (ids name rows in ``/v1/feedback``)
MAX_ID_CHARS = 128
#: request parameters taken: bayesify's, then the protocol's that change nothing here
REQUEST_PARAMETERS = ("samples", *ADAPTIVE_FIELDS, "seed", "scores", "binary_data_output",
                      "content_type",
                      "headers", "priority", "timeout", "sequence_id", "sequence_start",
                      "sequence_end")  # fmt: skip


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
        params = req.parameters or {}
        unknown = [k for k in params if k not in REQUEST_PARAMETERS]
        if unknown:
            return _error(f"parameters: unknown parameter(s) {names_listed(unknown)}; valid: "
                          f"{', '.join(REQUEST_PARAMETERS)}", 422)  # fmt: skip
        seed = params.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                                 or not 0 <= seed < 2**63):  # fmt: skip
            return _error(f"parameters.seed: an integer >= 0, got {seed!r}", 422)
        settings = app.state.settings
        named = params.get("scores")
        if named is not None and not isinstance(named, str):
            return _error(f"parameters.scores: score names separated by commas, got {named!r}",
                          422)  # fmt: skip
        try:
            samples, adaptive = requested_sampling(model, params, ["parameters"],
                                                   settings.max_samples)  # fmt: skip
            names = [s.strip() for s in named.split(",") if s.strip()] if named else None
            scores = model.check_scores(names, ["parameters", "scores"])
            check_size(req, len(body) + len(binary), settings.max_rows)
            arr = input_array(model, req, binary)
        except InputError as e:
            return _error(f"{'.'.join(map(str, e.loc))}: {e.message}", 422)
        limits = app.state.check_limits(len(arr), None, ["inputs", 0, "shape"])
        if limits is not None:
            detail = json.loads(limits.body)["detail"][0]
            return _error(f"{'.'.join(map(str, detail['loc']))}: {detail['msg']}", 422)
        try:
            answer = await app.state.run_rows(entry, arr, samples, seed=seed, adaptive=adaptive,
                                              scores=scores)  # fmt: skip
        except ValueError as e:
            where = "parameters.scores" if str(e).split(":")[0] in scores else "inputs.0"
            return _error(f"{where}: {e}", 422)
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
        parameters = {"warnings": answer.warnings} if answer.warnings else {}
        if model.predictor.distilled_from is not None:
            parameters["distilled_from"] = model.predictor.distilled_from
        if parameters:
            out["parameters"] = parameters
        return JSONResponse(out)

    add_repository_routes(app, repo)
