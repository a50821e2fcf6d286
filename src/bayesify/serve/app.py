"""The FastAPI application: bayesify's own endpoints, the Open Inference Protocol (v2), metrics,
feedback and the status page. Build it with :func:`create_app`; ``bayesify serve`` runs it.

Endpoints: ``POST /v1/predict``, ``POST /v1/feedback``, ``GET /v1/model``, ``GET /v1/status``,
``GET /healthz``, ``GET /metrics``, ``GET /`` (status page) and, from :mod:`.v2`,
``/v2/health/live|ready``, ``GET /v2/models/{name}[/versions/{version}][/ready]``,
``POST /v2/models/{name}[/versions/{version}]/infer`` and the model repository extension
(``POST /v2/repository/index``, ``POST /v2/repository/models/{name}/load|unload``). The models
are those of a :class:`~bayesify.serve.repository.Repository` (one bundle, or every bundle in a
folder); v1 requests name theirs with ``model`` (and ``version``) when several are served.
Every error is JSON: ``{"detail": ...}`` (v1; field errors as FastAPI lists them) or
``{"error": ...}`` (v2). Bad input is a 4xx naming the field, never a 500.

Feedback (:mod:`.monitor`) is only as trusted as its senders: **without an API key anyone who
can reach the server can post outcomes**, and with one every key holder can. What feedback can
change is the monitoring, never a prediction: the rolling figures, the drift gauges and
warnings, the status page. Its limits: outcomes name rows by ids the server made (a client's
own v2 ``id`` only while no other request carried it), so no client replaces another's row or
scores it by reusing an id; each row is scored at most once (later feedback for it is answered
``already_received``); outcomes must be finite numbers or known classes, and a regression
outcome beyond the bundle's recorded target range (widened by its width) or, without one, 1000
served standard deviations from the served mean is flagged and not scored; one request carries
at most a tenth of the rolling window, and a figure counts as drifting only if it does with any
one request's rows left out, so no single request raises a drift warning.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from bayesify.serve.docs import add_docs
from bayesify.serve.gate import Drain, _Gate
from bayesify.serve.metrics import ServerMetrics
from bayesify.serve.model import Adaptive, InputError, PassKey, ServedModel
from bayesify.serve.monitor import ACCEPTED, ALREADY, FLAGGED, INVALID, AmbiguousId
from bayesify.serve.repository import BatchSettings, Entry, ModelRequired, Repository, UnknownModel
from bayesify.serve.sampling import requested_sampling
from bayesify.serve.schemas import (
    ErrorResponse,
    FeedbackRequest,
    FeedbackResponse,
    PredictRequest,
    PredictResponse,
    json_body,
)

log = logging.getLogger(__name__)
API_KEY_ENV = "BAYESIFY_API_KEY"


@dataclass
class Settings:
    """Limits and batching of one server."""

    max_body_bytes: int = 4 * 2**20
    max_rows: int = 256
    max_samples: int = 256
    batch_wait_ms: float = 2.0
    batch_rows: int = 64  # 0: micro-batching off
    api_key: str | None = None
    body_timeout_s: float = 30.0  # for the whole body, from the end of the headers


def field_error(loc: list[str | int], msg: str, status: int = 422) -> JSONResponse:
    return JSONResponse({"detail": [{"loc": loc, "msg": msg, "type": "value_error"}]}, status)


#: endpoints whose successful answers are predictions (their latency goes to the monitor)
PREDICT_ENDPOINTS = {"/v1/predict", "/v2/models/{name}/infer",
                     "/v2/models/{name}/versions/{version}/infer"}  # fmt: skip


def not_served(e: UnknownModel) -> JSONResponse:
    """The v1 answer to a model or version that is not served: 404 naming what is, or a 422
    on ``model`` when several are served and the request named none."""
    if isinstance(e, ModelRequired):
        return field_error(["body", "model"], str(e))
    return JSONResponse({"detail": str(e)}, 404)


def create_app(models: ServedModel | Repository, settings: Settings | None = None) -> FastAPI:
    """The server for one model or a repository of them (``Repository.of_folder``);
    ``settings.api_key`` (else ``$BAYESIFY_API_KEY``) guards it."""
    settings = settings or Settings()
    api_key = settings.api_key or os.environ.get(API_KEY_ENV) or None
    batching = BatchSettings(settings.batch_wait_ms, settings.batch_rows)
    repo = (models if isinstance(models, Repository)
            else Repository.of_model(models, batching=batching))  # fmt: skip
    # one bundle: its metrics count every request, as they always did; a folder: requests
    # that name no model are counted with empty model and version labels
    first = next(repo.entries(), None)
    metrics = (first.metrics if first is not None and repo.root is None
               else ServerMetrics("", "", repo.families))  # fmt: skip

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        await repo.start()
        # Everything loaded so far (torch, the model, the app) lives as long as the server: a
        # full garbage collection would re-scan it all (a pause of about 100 ms, seen as a p99
        # spike); frozen, collections scan only what requests allocate.
        gc.collect()
        gc.freeze()
        for e in repo.entries():
            log.info("serving %s version %d (%s, %s)", e.name, e.version,
                     e.model.predictor.method.name, e.model.task)  # fmt: skip
        yield
        await repo.stop()

    errors = {400: {"model": ErrorResponse}, 401: {"model": ErrorResponse},
              413: {"model": ErrorResponse}}  # fmt: skip
    app = FastAPI(title="bayesify prediction server", version="1", lifespan=lifespan,
                  description=__doc__, responses=errors, docs_url=None,
                  redoc_url=None)  # fmt: skip
    add_docs(app)  # /docs and /redoc, offline
    app.state.repository, app.state.metrics, app.state.settings = repo, metrics, settings

    def count(scope: dict, status: int, elapsed: float) -> None:
        route = scope.get("route")
        endpoint = getattr(route, "path", "other")
        entry = Repository.addressed(scope)  # the model version the request was for, if any
        metrics = entry.metrics if entry is not None else app.state.metrics
        metrics.request(endpoint, scope.get("method", ""), status, elapsed)
        if endpoint in PREDICT_ENDPOINTS and status < 400 and entry is not None:
            entry.monitor.latency(elapsed)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": list(e.get("loc", [])), "msg": e.get("msg", ""),
                   "type": e.get("type", "value_error")} for e in exc.errors()]  # fmt: skip
        if request.url.path.startswith("/v2/"):
            text = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors)
            return JSONResponse({"error": text}, 422)
        return JSONResponse({"detail": errors}, 422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        key = "error" if request.url.path.startswith("/v2/") else "detail"
        return JSONResponse({key: exc.detail}, exc.status_code, headers=exc.headers)

    async def run_rows(entry: Entry, arr: Any, samples: int | None, level: float = 0.9,
                       seed: int | None = None, adaptive: Adaptive | None = None,
                       scores: tuple[str, ...] = ()) -> Any:  # fmt: skip
        model, batcher, metrics = entry.model, entry.batcher, entry.metrics
        if samples is None and model.adaptive is None and adaptive is None:
            samples = model.default_samples
        answer = await batcher.submit(PassKey(samples, level, seed, adaptive, scores), arr)
        if answer.error is not None:
            raise ValueError(answer.error)
        recs = answer.records
        metrics.served([bool(r.get("defer", False)) for r in recs],
                       [int(r["samples_used"]) for r in recs])  # fmt: skip
        return answer

    app.state.run_rows = run_rows

    def record(entry: Entry, answer: Any, level: float,
               alias: str | None = None) -> tuple[str, list[str]]:  # fmt: skip
        """Remember an answer's rows for feedback: a new request id and its row ids."""
        return entry.monitor.record_request(
            answer.records, samples=answer.columns.get("samples"), noise_std=answer.noise_std,
            level=level, alias=alias)  # fmt: skip

    app.state.record = record

    def check_limits(n_rows: int, samples: int | None, loc: list) -> JSONResponse | None:
        if n_rows > settings.max_rows:
            return field_error(loc, f"{n_rows} rows; at most {settings.max_rows} per request")
        if samples is not None and samples > settings.max_samples:
            msg = f"{samples}; at most {settings.max_samples} per request"
            return field_error(["body", "samples"], msg)
        return None

    app.state.check_limits = check_limits
    bad_input = {422: {"model": ErrorResponse, "description": "A field that cannot be used."}}
    not_found = {404: {"model": ErrorResponse, "description": "No such model or version served."}}

    @app.post(
        "/v1/predict",
        response_model=PredictResponse,
        responses={**bad_input, **not_found},
        openapi_extra=json_body(PredictRequest),
    )
    async def predict(request: Request) -> Response:
        """Per input row: the prediction, its uncertainty, interval or prediction set, the
        deferral decision, the samples used and a request id for feedback."""
        # the body is parsed and checked in one step by pydantic's JSON parser: the hot path
        # of the server, where the standard library's parser cost more than the rest of a
        # request's handling
        try:
            req = PredictRequest.model_validate_json(await request.body())
        except ValidationError as e:
            return JSONResponse({"detail": [
                {"loc": ["body", *d["loc"]], "msg": d["msg"], "type": d["type"]}
                for d in e.errors(include_url=False, include_context=False)
            ]}, 422)  # fmt: skip
        try:
            entry = repo.find(req.model, req.version, request.scope)
        except UnknownModel as e:
            return not_served(e)
        model = entry.model
        too_many = check_limits(len(req.inputs), None, ["body", "inputs"])
        if too_many is not None:
            return too_many
        try:
            samples, adaptive = requested_sampling(model, req.model_dump(), ["body"],
                                                   settings.max_samples)  # fmt: skip
            scores = model.check_scores(req.scores, ["body", "scores"])
            arr = model.encode(req.inputs)
        except InputError as e:
            return field_error(e.loc, e.message)
        try:
            answer = await run_rows(entry, arr, samples, req.level, req.seed, adaptive, scores)
        except ValueError as e:  # the predictor refused the rows (e.g. a value out of range)
            named = str(e).split(":")[0] in scores  # a score the method's outputs cannot give
            return field_error(["body", "scores" if named else "inputs"], str(e))
        out = []
        rid, row_ids = record(entry, answer, req.level)
        names = [str(c) for c in model.class_names] if model.class_names else None
        for i, (rec, row_id) in enumerate(zip(answer.records, row_ids, strict=True)):
            rec = dict(rec)
            if "probabilities" in rec:  # also keyed by class name (index without names)
                probs = rec["probabilities"]
                keys = names or [str(j) for j in range(len(probs))]
                rec["class_probabilities"] = dict(zip(keys, probs, strict=True))
            if req.return_samples:
                rec["samples"] = answer.columns["samples"][i].tolist()
            rec["request_id"] = row_id
            out.append(rec)
        body = {"model": model.name, "version": entry.version, "request_id": rid,
                "predictions": out}  # fmt: skip
        if model.predictor.distilled_from is not None:
            body["distilled_from"] = model.predictor.distilled_from
        if answer.warnings:
            body["warnings"] = answer.warnings
        return JSONResponse(body)

    @app.post("/v1/feedback", response_model=FeedbackResponse,
              responses={**bad_input, **not_found})  # fmt: skip
    async def feedback(req: FeedbackRequest, request: Request) -> Response:
        """True outcomes for rows served earlier: each row's ``request_id`` from ``/v1/predict``
        or the ``request_id`` output of ``/v2/models/{name}/infer``; for a one-row request, the
        request's own id (v1 ``request_id``, the Open Inference Protocol response ``id`` while
        no other request carried the same client id) also names its row. Updates the rolling
        figures in ``/metrics``, ``/v1/model`` and the status page. At most a tenth of the
        rolling window per request; every outcome is checked before any is used (a 422 leaves
        the figures as they were). Per outcome the answer says: ``accepted`` (scored),
        ``already_received`` (feedback for that row came before; not counted again),
        ``flagged`` (a regression outcome beyond the bound the monitor keeps; received, not
        scored) or ``unknown`` (never served or no longer remembered). ``model`` (and
        ``version``) name the model that served the rows when several are served."""
        try:
            entry = repo.find(req.model, req.version, request.scope)
        except UnknownModel as e:
            return not_served(e)
        monitor, metrics = entry.monitor, entry.metrics
        try:
            monitor.check_count(len(req.outcomes))
        except ValueError as e:
            return field_error(["body", "outcomes"], str(e))
        values = []
        for i, item in enumerate(req.outcomes):
            try:
                monitor.check_id(item.request_id)
            except AmbiguousId as e:
                return field_error(["body", "outcomes", i, "request_id"], str(e))
            try:
                values.append(monitor.outcome_value(item.outcome))
            except ValueError as e:
                return field_error(["body", "outcomes", i, "outcome"], str(e))
        accepted, unknown, already, flagged = 0, [], [], []
        ids = [item.request_id for item in req.outcomes]
        try:  # one transaction; an invalid row ends the list (a class beyond the row's)
            for i, (status, reason) in enumerate(
                monitor.feedback_many(list(zip(ids, values, strict=True)))
            ):
                if status == INVALID:
                    return field_error(["body", "outcomes", i, "outcome"], str(reason))
                if status == ACCEPTED:
                    accepted += 1
                elif status == ALREADY:
                    already.append(ids[i])
                elif status == FLAGGED:
                    flagged.append({"request_id": ids[i], "reason": reason})
                else:
                    unknown.append(ids[i])
        finally:
            metrics.feedback(accepted, len(flagged))
            monitor.refresh()
            metrics.set_figures(monitor.figures())
        return JSONResponse({"accepted": accepted, "unknown": unknown,
                             "already_received": already, "flagged": flagged})  # fmt: skip

    @app.get("/v1/model", response_model=None, responses=not_found)
    async def model_card(request: Request, name: str | None = None,
                         version: int | None = None) -> dict[str, Any] | Response:  # fmt: skip
        """The model card: method, task, input shape, sampling, the deferral policy with its
        validation figures, limits, and the rolling figures of what was served. When several
        models are served: the list of them, or with ``?name=`` (and ``&version=``) one's."""
        if name is None and version is None and not repo.single:
            return {"models": repo.summaries()}
        try:
            entry = repo.find(name, version, request.scope)
        except UnknownModel as e:
            return JSONResponse({"detail": str(e)}, 404)
        model, batcher, monitor = entry.model, entry.batcher, entry.monitor
        card = model.card()
        card["version"] = entry.version
        card["limits"] = {"max_rows": settings.max_rows, "max_samples": settings.max_samples,
                          "max_body_bytes": settings.max_body_bytes}  # fmt: skip
        card["batching"] = {"enabled": batcher.enabled, "max_wait_ms": settings.batch_wait_ms,
                            "max_rows": settings.batch_rows}  # fmt: skip
        card["monitor"] = monitor.figures()
        return card

    @app.get("/v1/status", response_model=None, responses=not_found)
    async def status(name: str | None = None, version: int | None = None,
                     history_of: str | None = None,
                     history_after: int | None = None) -> dict[str, Any] | Response:  # fmt: skip
        """What the status page polls: the summary and live figures of one model (``?name=``
        and ``&version=``; default: the first served), its ``history`` of snapshots when the
        monitor keeps one (``history_seq``: the newest one's number; ``history_total``: how
        many there are), and every model with its version, state and, when loaded, whether
        it has a deferral policy (``models``). With ``history_of=NAME/VERSION`` naming the
        model shown and ``history_after=SEQ``, ``history`` holds only the snapshots after
        number SEQ (echoed as ``history_after``); the reader appends them and keeps the last
        ``history_total``."""
        models = repo.summaries(unloaded=True)
        for m in models:
            if m["state"] == "READY":
                m["deferral_policy"] = repo.get(m["name"], m["version"]).model.policy is not None
        try:
            if name is None and version is None:
                entry = next(repo.entries())
            else:
                entry = repo.get(name, version)
        except UnknownModel as e:
            return JSONResponse({"detail": str(e)}, 404)
        except StopIteration:  # nothing loaded
            return {"model": None, "models": models, "time": time.time()}
        model, monitor = entry.model, entry.monitor
        card = model.card()
        summary = {k: card.get(k) for k in ("name", "method", "task", "input_shape",
                                             "class_names", "sampling", "int8")}  # fmt: skip
        summary["version"] = entry.version
        out = {"model": summary, "deferral": card["deferral"], "monitor": monitor.figures(),
               "drifting": monitor.drifting, "time": time.time(), "models": models}  # fmt: skip
        if hasattr(monitor, "history_after"):
            shown = history_of == f"{summary['name']}/{entry.version}"
            after = history_after if shown and history_after is not None else None
            out["history"], out["history_seq"], out["history_total"] = monitor.history_after(
                after or 0
            )
            if after is not None:
                out["history_after"] = after
        return JSONResponse(out)  # plain JSON: its encoder took 3/4 of a 500-snapshot answer

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", response_class=Response)
    async def prometheus() -> Response:
        """Prometheus text format."""
        return Response(repo.metrics_text(), media_type="text/plain; version=0.0.4")

    static = resources.files("bayesify.serve").joinpath("static")  # one page, charts inlined
    charts = static.joinpath("charts.js").read_text()
    page = static.joinpath("status.html").read_text().replace("/* charts.js */", charts)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def status_page() -> HTMLResponse:
        return HTMLResponse(page)

    from bayesify.serve.v2 import add_v2_routes

    add_v2_routes(app, repo)
    app.state.drain = Drain()  # started by the listener on SIGTERM
    app.add_middleware(_Gate, limit=settings.max_body_bytes, api_key=api_key, on_response=count,
                       body_timeout=settings.body_timeout_s, drain=app.state.drain)  # fmt: skip
    return app
