"""The model repository extension of the Open Inference Protocol: the index of the server's
folder, and loading or unloading a model while the server runs (as Triton's). See :mod:`.v2`.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from bayesify.serve.repository import Repository, UnknownModel
from bayesify.serve.schemas import V2Error


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status)


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
