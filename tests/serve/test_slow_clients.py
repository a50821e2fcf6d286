"""Slow clients against the connection slots, as real processes: clients that trickle headers
and reconnect after every 408 cannot keep a client with the API key out (the slots they may
hold are bounded and the oldest of the address holding the most gives way), while connections
with the key that hold every slot still make a further one wait (503)."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest

from bayesify.bench.serve.slow_clients import siege

from .conftest import API_KEY, start_server, stop_server, toy_data

KEY = {"X-API-Key": API_KEY}
CAP = 40


@pytest.fixture(scope="module")
def guarded(toy_bundle, tmp_path_factory):
    """A keyed server with at most 40 connections (10 reserved: the default quarter), a 1 s
    header timeout and idle connections kept a minute."""
    srv = start_server(toy_bundle, tmp_path_factory.mktemp("log") / "server.log",
                       "--header-timeout", "1", "--max-connections", str(CAP),
                       "--keep-alive", "60", env={"BAYESIFY_API_KEY": API_KEY})  # fmt: skip
    yield srv
    stop_server(srv)


def _address(srv) -> tuple[str, int]:
    host, port = srv.url.removeprefix("http://").split(":")
    return host, int(port)


def test_reconnecting_slow_header_clients_cannot_keep_a_keyed_client_out(guarded):
    # 60 clients from 127.0.0.2, each a header line every 0.3 s and reconnecting at once
    # whenever answered; the keyed client from 127.0.0.3 opens a new connection per request.
    # Before: the 60 held the 40-connection cap and the keyed client got 503 on every request
    report = asyncio.run(siege(*_address(guarded), API_KEY, attackers=60, seconds=12,
                               requests=25, drip=0.3, warmup=2.0))  # fmt: skip
    print(report.line())
    assert report.keyed == {"200": 25}, report.line()
    assert report.connects > 60 and report.attacks["503"] > 0, report.line()  # they came back
    assert max(report.keyed_seconds) < 5, report.line()
    # the siege is over: nothing is left holding slots
    r = httpx.post(f"{guarded.url}/v1/predict", json={"inputs": toy_data(2, 0)[0].tolist()},
                   headers=KEY, timeout=30)  # fmt: skip
    assert r.status_code == 200, r.text


def test_keyless_connections_leave_the_reserved_slots_to_keyed_ones(guarded):
    host, port = _address(guarded)
    held: list[socket.socket] = []

    def hold(source: str, key: bool) -> bytes:
        s = socket.create_connection((host, port), timeout=10, source_address=(source, 0))
        held.append(s)
        s.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
            + (b"X-API-Key: " + API_KEY.encode() + b"\r\n" if key else b"")
            + b"\r\n"
        )
        return s.recv(4096)

    try:
        # keyless probes from two addresses: answered, but they may hold 30 slots at most, the
        # oldest of the busier address giving way to each newcomer
        for i in range(50):
            assert hold("127.0.0.4" if i % 3 else "127.0.0.5", key=False).startswith(
                b"HTTP/1.1 200"
            )
        # 40 connections with the key: each takes a slot (keyless ones give way)
        for _ in range(CAP):
            assert hold("127.0.0.6", key=True).startswith(b"HTTP/1.1 200")
        # every slot is held by a connection with the key: a further one waits (503)
        with socket.create_connection((host, port), timeout=10,
                                      source_address=("127.0.0.7", 0)) as s:  # fmt: skip
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-API-Key: "
                      + API_KEY.encode() + b"\r\n\r\n")  # fmt: skip
            got = s.recv(4096)
        assert got.startswith(b"HTTP/1.1 503") and b"retry-after" in got.lower(), got
    finally:
        for s in held:
            s.close()
    time.sleep(0.3)
    assert httpx.get(f"{guarded.url}/v1/model", headers=KEY, timeout=30).status_code == 200
