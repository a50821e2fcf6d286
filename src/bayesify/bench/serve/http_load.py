"""A lean closed-loop HTTP/1.1 load generator: C keep-alive connections on loopback, each sending
its next request when the previous answer is complete, until a fixed number are answered.

The clients share the machine with the server they measure, so every millisecond of client CPU
is taken from the server: requests are encoded once, up front, and written as raw bytes on an
``asyncio.Protocol``; answers are parsed by ``httptools`` (the parser uvicorn itself uses). The
client's own CPU time per request is measured and reported beside the latencies.
"""

from __future__ import annotations

import asyncio
import gc
import json
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httptools


@dataclass
class LoadResult:
    """Latencies (seconds) of answered requests, the wall time, the non-200 answers, the
    client's CPU seconds and what ``inspect`` returned for each 200 answer."""

    latencies: list[float] = field(default_factory=list)
    wall: float = 0.0
    errors: int = 0
    client_cpu: float = 0.0
    inspected: list[Any] = field(default_factory=list)

    @property
    def answered(self) -> int:
        return len(self.latencies)


class _Connection(asyncio.Protocol):
    """One keep-alive connection: ``request(raw)`` -> (status, body)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._body: list[bytes] = []
        self._done: asyncio.Future | None = None
        self._lost: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: BaseException | None) -> None:
        self._lost = exc or ConnectionError("connection closed by the server")
        if self._done is not None and not self._done.done():
            self._done.set_exception(self._lost)

    def data_received(self, data: bytes) -> None:
        self._parser.feed_data(data)

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result((self._parser.get_status_code(), b"".join(self._body)))

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        if self._lost is not None:
            raise self._lost
        assert self.transport is not None
        self._body = []
        self._done = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return await self._done


def post_request(url: str, path: str, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    """The raw bytes of an HTTP/1.1 keep-alive POST of a JSON ``body`` to ``url`` + ``path``."""
    host = urlsplit(url).netloc
    extra = [f"{k}: {v}" for k, v in (headers or {}).items()]
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json",
             f"Content-Length: {len(body)}", *extra]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def closed_loop(
    url: str,
    requests: Sequence[bytes],
    clients: int,
    total: int,
    inspect: Callable[[bytes], Any] | None = None,
) -> LoadResult:
    """``clients`` connections send the raw ``requests`` (cycled) back to back until ``total``
    are answered; ``inspect(body)`` is called on every 200 answer (e.g. to read a field)."""
    if clients < 1 or total < 1 or not requests:
        raise ValueError(f"need clients >= 1, total >= 1 and requests, got {clients}, {total}")
    parts = urlsplit(url)
    loop = asyncio.get_running_loop()
    conns = [
        (await loop.create_connection(_Connection, parts.hostname, parts.port))[1]
        for _ in range(clients)
    ]
    # the caller's heap (torch, data) is not the server's time: no full collection mid-run
    gc.collect()
    gc.freeze()
    res = LoadResult()
    counter = iter(range(total))

    async def worker(conn: _Connection) -> None:
        for i in counter:
            t = time.perf_counter()
            status, body = await conn.request(requests[i % len(requests)])
            res.latencies.append(time.perf_counter() - t)
            if status != 200:
                res.errors += 1
            elif inspect is not None:
                res.inspected.append(inspect(body))

    cpu, start = _cpu_seconds(), time.perf_counter()
    try:
        await asyncio.gather(*(worker(c) for c in conns))
    finally:
        res.wall = time.perf_counter() - start
        res.client_cpu = _cpu_seconds() - cpu
        for c in conns:
            if c.transport is not None:
                c.transport.close()
        gc.unfreeze()
    return res


def samples_used(body: bytes) -> list[int]:
    """``samples_used`` of every row of a ``/v1/predict`` answer."""
    return [p["samples_used"] for p in json.loads(body)["predictions"]]
