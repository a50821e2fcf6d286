"""uvicorn as ``bayesify serve`` runs it: what the ASGI gate cannot see from inside a request.

- **Header timeout**: a connection whose request line and headers are not complete within
  ``header_timeout`` seconds of its first byte (or of the connection, for the first request)
  is answered 408 and closed; headers larger than ``max_header_bytes`` are refused (400).
  uvicorn has neither for its httptools protocol; its h11 protocol has the size cap only.
- **Connections**: at most ``max_connections`` open, of which ``reserved_connections`` only
  for connections that have shown the API key (:mod:`.connections`: when no slot is free, the
  oldest connection still waiting for its headers, of the address holding the most of them,
  gives way; when admitted connections hold every slot, a new one gets 503); idle keep-alive
  connections closed after ``keep_alive`` seconds.
- **Binding**: :func:`bind` takes the address before anything is announced, so a port in use
  is an ``OSError`` and nothing else.
- **Shutdown**: on SIGTERM the gate's :class:`~bayesify.serve.gate.Drain` starts (new requests
  get 503 with ``Retry-After``), requests in flight get ``grace`` seconds to finish, and the
  gate answers those still running after it 503 with ``Retry-After``.

With ``--workers N`` each of N processes runs this on one inherited socket (:mod:`.workers`);
every guarantee above then holds per worker process.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import uvicorn

from bayesify.serve.connections import ConnectionBook, ConnectionLimits
from bayesify.serve.gate import RETRY_AFTER_S, Drain, has_key

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
    #: slots only connections that showed the key may take (None: a quarter of the cap)
    reserved_connections: int | None = None
    #: the API key that admits a connection (None: whole headers admit it)
    api_key: str | None = None

    def __post_init__(self) -> None:
        self.limits  # noqa: B018 - refuses reserved slots beyond the cap now, in one line

    @property
    def limits(self) -> ConnectionLimits:
        return ConnectionLimits(self.max_connections, self.reserved_connections)


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: a free one), not listening yet; an
    ``OSError`` (e.g. the address in use, an unknown host) otherwise."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _protocol(header_timeout: float, max_header_bytes: int, book: ConnectionBook,
              api_key: str | None) -> type[asyncio.Protocol] | str:  # fmt: skip
    """uvicorn's httptools protocol with a header timeout and size cap, its connections
    booked in ``book`` (h11 where httptools is missing: its size cap only)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - uvicorn[standard] brings httptools
        log.warning("httptools is missing: request headers have no timeout")
        return "h11"

    class GatedHttpTools(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None
        _header_bytes = 0
        _draining = False
        _refused = False

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
            if not book.arrive(self, self.client[0] if self.client else None):
                self._refused = True  # every slot is held by connections with the key
                transport.write(_GONE)
                transport.close()
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            book.leave(self)
            super().connection_lost(exc)

        def give_way(self) -> None:
            """A newer connection takes this one's slot (see :mod:`.connections`)."""
            waiting = self._header_timer is not None  # for (the rest of) a request's headers
            self._disarm()
            if self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_complete:
                self.cycle.keep_alive = False  # answering a request: close after it
                return
            if waiting:
                self.transport.write(_GONE)
            self.transport.close()

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
            if api_key is None or has_key(self.headers, api_key):
                book.admit(self)
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

    def __init__(self, config: uvicorn.Config, drain: Drain,
                 on_ready: Callable[[], None] | None = None) -> None:  # fmt: skip
        super().__init__(config)
        self.drain = drain
        self.on_ready = on_ready

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started and self.on_ready is not None:
            self.on_ready()

    async def shutdown(self, sockets: Any = None) -> None:
        self.drain.start()
        await super().shutdown(sockets)


def run(app: Any, sock: socket.socket, settings: ListenerSettings, log_level: str,
        on_ready: Callable[[], None] | None = None) -> None:  # fmt: skip
    """Serve ``app`` (whose ``app.state.drain`` the gate reads) on ``sock`` (from :func:`bind`)
    until SIGTERM or SIGINT; ``on_ready`` is called once it listens."""
    book = ConnectionBook(settings.limits)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=_protocol(
            settings.header_timeout, settings.max_header_bytes, book, settings.api_key
        ),  # fmt: skip
        h11_max_incomplete_event_size=settings.max_header_bytes,
        # the book caps connections; this caps requests in flight, those of connections
        # already closed included
        limit_concurrency=2 * settings.max_connections,
        timeout_keep_alive=settings.keep_alive,
        timeout_graceful_shutdown=settings.grace,
    )
    _DrainingServer(config, app.state.drain, on_ready).run(sockets=[sock])
