"""The server's gate: the one ASGI middleware in front of every endpoint (body limit, API key,
JSON 500s, request counting)."""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

from fastapi.responses import JSONResponse, Response

log = logging.getLogger(__name__)
#: reachable without the API key: probes and the (data-free) status page shell
OPEN_PATHS = {"/healthz", "/v2/health/live", "/v2/health/ready", "/", "/openapi.json", "/docs"}


_GONE = Response(status_code=499)


class _Gate:
    """The server's one ASGI middleware (plain ASGI: no task per request): reads the body
    first, at most ``limit`` bytes with or without a Content-Length (413 when larger), checks
    the API key where one is set (401), turns an unhandled error into a JSON 500, and counts
    every HTTP request in the metrics (``on_response(scope, status, seconds)``)."""

    def __init__(self, app: Any, limit: int, api_key: str | None, on_response: Any) -> None:
        self.app, self.limit, self.api_key, self.on_response = app, limit, api_key, on_response

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 500
        started = False

        async def send_counted(message: dict) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
            await send(message)

        try:
            refusal, receive = await self._read_body(scope, receive)
            if refusal is _GONE:
                status = 499  # the client went away before its body arrived: nobody to answer
                return None
            if refusal is None:
                refusal = self._check_key(scope)
            if refusal is not None:
                return await refusal(scope, receive, send_counted)
            try:
                await self.app(scope, receive, send_counted)
            except Exception:  # noqa: BLE001 - logged; the client gets a JSON 500
                log.exception("unhandled error on %s", scope.get("path"))
                if not started:
                    await JSONResponse({"detail": "internal error"}, 500)(scope, receive,
                                                                          send_counted)  # fmt: skip
        finally:
            self.on_response(scope, status, time.perf_counter() - start)

    async def _read_body(self, scope: dict, receive: Any) -> tuple[Response | None, Any]:
        """A 413 response, or None and a ``receive`` that replays the body read."""
        too_big = JSONResponse({"detail": f"request body over {self.limit} bytes"}, 413)
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return too_big, receive
        chunks, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return _GONE, receive
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > self.limit:
                return too_big, receive
            if not message.get("more_body", False):
                break
        body, sent = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return None, replay

    def _check_key(self, scope: dict) -> Response | None:
        path = scope.get("path", "")
        if not self.api_key or path in OPEN_PATHS:
            return None
        headers = dict(scope.get("headers", []))
        given = headers.get(b"x-api-key", b"").decode("latin-1")
        auth = headers.get(b"authorization", b"").decode("latin-1")
        if auth.lower().startswith("bearer "):
            given = auth[7:]
        if secrets.compare_digest(given.encode(), self.api_key.encode()):
            return None
        detail = "missing or wrong API key (X-API-Key or Authorization: Bearer)"
        return JSONResponse({"error": detail} if path.startswith("/v2/") else
                            {"detail": detail}, 401)  # fmt: skip
