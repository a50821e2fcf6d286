"""The model repository extension of the Open Inference Protocol: the index of the server's
folder, and loading or unloading a model while the server runs (as Triton's). See :mod:`.v2`.

Every body is checked by pydantic's JSON parser before it is used (its nesting depth is bounded,
so a deeply nested body is a 400 like any other malformed one); an empty body is ``{}``.
Errors are ``{"error": message}``: 400 for a body or a bundle that cannot be used, 404 for a
model that is not there, 409 when a load would hold more versions than ``--max-models``, and
409 for any load or unload on a server of several worker processes (``--workers``: each
worker holds its own models, and a request reaches one of them).
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError

from bayesify.serve.repository import Repository, TooManyModels, UnknownModel
from bayesify.serve.schemas import V2Error, inline_schema
from bayesify.serve.workers import worker_index

#: the answer to a load or unload on a server of several worker processes
ONE_WORKER_ONLY = ("this server runs several worker processes (--workers), each holding its "
                   "own models, and a request reaches one of them: load and unload models "
                   "with --workers 1, or restart the server with the models wanted")  # fmt: skip


class IndexRequest(BaseModel):
    """``ready``: list only the loaded versions."""

    model_config = ConfigDict(extra="forbid")
    ready: StrictBool = False


class LoadRequest(BaseModel):
    """``parameters`` (Triton's config overrides and files) are not taken: bundles are loaded
    as they are in the folder."""

    model_config = ConfigDict(extra="forbid")
    parameters: dict[str, Any] | None = None


class UnloadParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")
    unload_dependents: StrictBool = False  # tritonclient sends it; a bundle has no dependents


class UnloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    parameters: UnloadParameters | None = None


M = TypeVar("M", bound=BaseModel)


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status)


async def _parse(request: Request, model: type[M]) -> M | JSONResponse:
    """The request's body as ``model`` (an empty body: its defaults), or the 400 saying why."""
    body = await request.body()
    try:
        return model.model_validate_json(body if body.strip() else b"{}")
    except ValidationError as e:
        text = "; ".join(f"{'.'.join(map(str, d['loc'])) or 'body'}: {d['msg']}"
                         for d in e.errors(include_url=False))  # fmt: skip
        return _error(text, 400)


def _body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` documenting ``model`` as the endpoint's optional JSON body."""
    content = {"application/json": {"schema": inline_schema(model)}}
    return {"requestBody": {"required": False, "content": content}}


def add_repository_routes(app: FastAPI, repo: Repository) -> None:
    """The model repository extension: the index, load and unload."""
    errors: dict[int | str, dict[str, Any]] = {400: {"model": V2Error}, 404: {"model": V2Error}}

    @app.post("/v2/repository/index", responses={400: {"model": V2Error}},
              openapi_extra=_body(IndexRequest))  # fmt: skip
    async def repository_index(request: Request) -> Response:
        """Every model version in the server's folder or loaded: ``name``, ``version``,
        ``state`` (``READY`` or ``UNAVAILABLE``) and, when not loaded, ``reason`` (a bundle in
        a folder not named as a version is listed under that name, with why). Body
        ``{"ready": true}`` lists only the loaded ones."""
        req = await _parse(request, IndexRequest)
        if isinstance(req, JSONResponse):
            return req
        rows = repo.index()
        return JSONResponse([r for r in rows if r["state"] == "READY"] if req.ready else rows)

    @app.post("/v2/repository/models/{name}/load", openapi_extra=_body(LoadRequest),
              responses={**errors, 409: {"model": V2Error}})  # fmt: skip
    async def load(name: str, request: Request) -> Response:
        """Load every version of ``name`` found in the server's folder now and not loaded yet
        (a bundle copied there after start-up included); loaded versions stay as they are.
        409 when the server would then hold more versions than ``--max-models``."""
        req = await _parse(request, LoadRequest)
        if isinstance(req, JSONResponse):
            return req
        if req.parameters:
            return _error(f"parameters {sorted(req.parameters)}: not taken; bayesify loads "
                          "bundles from its folder as they are there", 400)  # fmt: skip
        if worker_index() is not None:
            return _error(ONE_WORKER_ONLY, 409)
        try:
            await repo.load(name)
        except UnknownModel as e:
            return _error(str(e), 404)
        except TooManyModels as e:
            return _error(str(e), 409)
        except ValueError as e:
            return _error(f"failed to load {e}", 400)
        return JSONResponse({})

    @app.post("/v2/repository/models/{name}/unload", responses={**errors, 409: {"model": V2Error}},
              openapi_extra=_body(UnloadRequest))  # fmt: skip
    async def unload(name: str, request: Request) -> Response:
        """Stop serving every version of ``name``; requests already queued are answered."""
        req = await _parse(request, UnloadRequest)
        if isinstance(req, JSONResponse):
            return req
        if worker_index() is not None:
            return _error(ONE_WORKER_ONLY, 409)
        try:
            await repo.unload(name)
        except UnknownModel as e:
            return _error(str(e), 404)
        return JSONResponse({})
