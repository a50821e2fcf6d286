"""uvicorn as ``bayesify serve`` runs it: what the ASGI gate cannot see from inside a request.

- **Header timeout**: a connection whose request line and headers are not complete within
  ``header_timeout`` seconds of its first byte (or of the connection, for the first request)
  is answered 408 and closed; headers larger than ``max_header_bytes`` are refused (400).
  uvicorn has neither for its httptools protocol; its h11 protocol has the size cap only.
- **Connections**: at most ``max_connections`` open (uvicorn's ``limit_concurrency``: requests
  beyond it get 503), idle keep-alive connections closed after ``keep_alive`` seconds.
- **Shutdown**: on SIGTERM the gate's :class:`~bayesify.serve.gate.Drain` starts (new requests
  get 503 with ``Retry-After``), requests in flight get ``grace`` seconds to finish, and the
  gate answers those still running after it 503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import uvicorn

from bayesify.serve.gate import RETRY_AFTER_S, Drain

log = logging.getLogger(__name__)
_LATE = b"request headers not received in time"
_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\n" + (
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_LATE), _LATE)
)

_GONE = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nretry-after: %d\r\n"
         b"connection: close\r\n\r\n" % RETRY_AFTER_S)  # fmt: skip
#: seconds a connection without a whole request is kept open once shutdown begins
_LAST_CALL_S = 1.0


@dataclass
class ListenerSettings:
    """Timeouts, connection cap and shutdown grace of one server (seconds, counts, bytes)."""

    header_timeout: float = 10.0
    keep_alive: int = 5
    max_connections: int = 256
    max_header_bytes: int = 64 * 2**10
    grace: float = 30.0


def _protocol(header_timeout: float, max_header_bytes: int) -> type[asyncio.Protocol] | str:
    """uvicorn's httptools protocol with a header timeout and size cap (h11 where httptools is
    missing: its size cap, no header timeout)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - uvicorn[standard] brings httptools
        log.warning("httptools is missing: request headers have no timeout")
        return "h11"

    class GatedHttpTools(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None
        _header_bytes = 0
        _draining = False

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_bytes = 0
                self._header_timer = self.loop.call_later(header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.write(_GONE if self._draining else _TIMED_OUT)
                self.transport.close()

        def _count(self, n: int) -> None:
            self._header_bytes += n
            if self._header_bytes > max_header_bytes:  # the parser answers 400 and closes
                raise ValueError(f"request headers over {max_header_bytes} bytes")

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_url(self, url: bytes) -> None:
            self._count(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value))
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def shutdown(self) -> None:
            # uvicorn closes a connection at once unless a request on it is being answered;
            # one whose request has not been read whole yet is given a second more (the
            # draining gate answers it 503), then closed
            self._draining = True
            if self.cycle is None or self._header_timer is not None:
                self._disarm()
                self._header_timer = self.loop.call_later(
                    min(header_timeout, _LAST_CALL_S), self._headers_late
                )
            else:
                super().shutdown()

    return GatedHttpTools


class _DrainingServer(uvicorn.Server):
    """uvicorn's server that starts the gate's drain before its own graceful shutdown."""

    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        super().__init__(config)
        self.drain = drain

    async def shutdown(self, sockets: Any = None) -> None:
        self.drain.start()
        await super().shutdown(sockets)


def run(app: Any, host: str, port: int, settings: ListenerSettings, log_level: str) -> None:
    """Serve ``app`` (whose ``app.state.drain`` the gate reads) until SIGTERM or SIGINT."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=_protocol(settings.header_timeout, settings.max_header_bytes),
        h11_max_incomplete_event_size=settings.max_header_bytes,
        limit_concurrency=settings.max_connections,
        timeout_keep_alive=settings.keep_alive,
        timeout_graceful_shutdown=settings.grace,
    )
    _DrainingServer(config, app.state.drain).run()
