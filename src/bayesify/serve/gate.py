"""The server's gate: the one ASGI middleware in front of every endpoint.

In order, per HTTP request: during shutdown, a 503 with ``Retry-After``; the API key checked
from the headers alone, before any body byte is read (401, connection closed, so a keyless
client costs no body memory); the body read in at most ``body_timeout`` seconds (408) and at
most ``limit`` bytes (413); an unhandled error turned into a JSON 500, and a request cut short
by the end of the shutdown grace period answered 503 with ``Retry-After``. Every request is
counted in the metrics (``on_response(scope, status, seconds)``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Any

from fastapi.responses import JSONResponse, Response

log = logging.getLogger(__name__)
#: reachable without the API key: probes and the (data-free) status page shell and API docs
OPEN_PATHS = {"/healthz", "/v2/health/live", "/v2/health/ready", "/", "/openapi.json", "/docs",
              "/redoc"}  # fmt: skip
#: the API docs' own scripts and styles (served from this package, no CDN)
OPEN_PREFIXES = ("/docs/",)
#: seconds a client told 503 during shutdown is asked to wait before trying again
RETRY_AFTER_S = 5


class Drain:
    """Shutdown state shared by the listener, which starts it when SIGTERM arrives, and the
    gate, which then answers new requests and those cut short by the grace period with 503."""

    def __init__(self, retry_after: int = RETRY_AFTER_S) -> None:
        self.draining = False
        self.retry_after = retry_after

    def start(self) -> None:
        self.draining = True


def is_open(path: str) -> bool:
    """Whether ``path`` is answered without the API key."""
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def refusal(path: str, status: int, text: str, headers: dict[str, str] | None = None,
            close: bool = True) -> Response:  # fmt: skip
    """A JSON error in the path's dialect (v2: ``{"error"}``, else ``{"detail"}``); with
    ``close``, the connection is closed after it (the client may still be sending a body that
    nobody will read)."""
    body = {"error": text} if path.startswith("/v2/") else {"detail": text}
    headers = {**(headers or {}), **({"Connection": "close"} if close else {})}
    return JSONResponse(body, status, headers=headers)


_GONE = Response(status_code=499)


class _Gate:
    """See the module docstring. ``limit``: largest body in bytes, with or without a
    Content-Length; ``body_timeout``: seconds for the whole body to arrive after the headers;
    ``drain``: the shutdown state (None: never draining)."""

    def __init__(self, app: Any, limit: int, api_key: str | None, on_response: Any,
                 body_timeout: float = 30.0, drain: Drain | None = None) -> None:  # fmt: skip
        self.app, self.limit, self.api_key, self.on_response = app, limit, api_key, on_response
        self.body_timeout = body_timeout
        self.drain = drain or Drain()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 500
        started = counted = False

        def count() -> None:
            nonlocal counted
            if not counted:
                counted = True
                self.on_response(scope, status, time.perf_counter() - start)

        async def send_counted(message: dict) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                # counted before the last byte leaves: a client that has its answer and then
                # scrapes /metrics (of this process or another worker) finds it counted
                count()
            await send(message)

        try:
            answer = self._unavailable(scope) if self.drain.draining else self._check_key(scope)
            if answer is None:
                answer, receive = await self._read_body(scope, receive)
            if answer is _GONE:
                status = 499  # the client went away before its body arrived: nobody to answer
                return None
            if answer is not None:
                return await answer(scope, receive, send_counted)
            try:
                await self.app(scope, receive, send_counted)
            except Exception:  # noqa: BLE001 - logged; the client gets a JSON 500
                log.exception("unhandled error on %s", scope.get("path"))
                if not started:
                    await refusal(scope.get("path", ""), 500, "internal error",
                                  close=False)(scope, receive, send_counted)  # fmt: skip
        except asyncio.CancelledError:
            # the shutdown grace period is over and the server cancels what still runs: the
            # client learns to come back, not that the server failed
            if not self.drain.draining or started:
                raise
            await self._unavailable(scope)(scope, receive, send_counted)
        finally:
            count()

    def _unavailable(self, scope: dict) -> Response:
        return refusal(scope.get("path", ""), 503, "the server is shutting down; try again",
                       {"Retry-After": str(self.drain.retry_after)})  # fmt: skip

    async def _read_body(self, scope: dict, receive: Any) -> tuple[Response | None, Any]:
        """A 413 or 408 response, or None and a ``receive`` that replays the body read."""
        path = scope.get("path", "")
        # kept open: the server discards the rest of the body unread, and the client, which
        # writes its whole body before it reads, still gets the 413
        too_big = refusal(path, 413, f"request body over {self.limit} bytes", close=False)
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return too_big, receive
        chunks, seen = [], 0
        try:
            async with asyncio.timeout(self.body_timeout):
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
        except TimeoutError:
            slow = f"request body not received within {self.body_timeout:g} s"
            return refusal(path, 408, slow), receive
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
        if not self.api_key or is_open(path) or has_key(scope.get("headers", []), self.api_key):
            return None
        return refusal(path, 401, "missing or wrong API key (X-API-Key or Authorization: Bearer)")


def has_key(headers: list[tuple[bytes, bytes]], api_key: str) -> bool:
    """Whether request ``headers`` (lower-case names) carry ``api_key``, as ``X-API-Key`` or
    ``Authorization: Bearer`` (compared in constant time)."""
    found = dict(headers)
    given = found.get(b"x-api-key", b"").decode("latin-1")
    auth = found.get(b"authorization", b"").decode("latin-1")
    if auth.lower().startswith("bearer "):
        given = auth[7:]
    return secrets.compare_digest(given.encode(), api_key.encode())
