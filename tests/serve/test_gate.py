"""The server's gate under abuse, as a real process: a keyless flood of 4 MiB bodies costs no
memory (the key is checked before any body byte is read), slow clients are dropped within the
configured timeouts, SIGTERM under load answers 503 with Retry-After (never 500), serving
without a key on a public address warns, and the docs work offline."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from bayesify.bench.process import cli_path

from .conftest import API_KEY, start_server, stop_server, toy_data

KEY = {"X-API-Key": API_KEY}
TIMEOUT_S = 1.0
MAX_CONNECTIONS = 130


@pytest.fixture(scope="module")
def keyed(toy_bundle, tmp_path_factory):
    """A server with an API key, 1 s header and body timeouts, at most 130 connections, and
    idle connections kept a minute."""
    srv = start_server(toy_bundle, tmp_path_factory.mktemp("log") / "server.log",
                       "--header-timeout", str(TIMEOUT_S), "--body-timeout", str(TIMEOUT_S),
                       "--max-connections", str(MAX_CONNECTIONS), "--keep-alive", "60",
                       env={"BAYESIFY_API_KEY": API_KEY})  # fmt: skip
    yield srv
    stop_server(srv)


def _rss_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1)) / 1024


def _address(srv) -> tuple[str, int]:
    host, port = srv.url.removeprefix("http://").split(":")
    return host, int(port)


async def _keyless_flood(address: tuple[str, int], clients: int, size: int) -> list[bytes]:
    """``clients`` concurrent keyless POSTs, each sending a ``size``-byte body; each one's
    status line, or b"closed" where the server cut the connection."""
    body = memoryview(b"0" * size)
    head = (f"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n").encode()  # fmt: skip

    async def one() -> bytes:
        try:
            reader, writer = await asyncio.open_connection(*address)
            writer.write(head)
            for i in range(0, size, 2**16):
                writer.write(body[i : i + 2**16])
                await writer.drain()
            line = await asyncio.wait_for(reader.readline(), 30)
            writer.close()
            return line or b"closed"
        except OSError:  # reset while sending: the server stopped reading and closed
            return b"closed"

    return await asyncio.gather(*(one() for _ in range(clients)))


def test_keyless_flood_of_4mib_bodies_costs_no_memory(keyed):
    x = toy_data(4, 0)[0].tolist()
    assert httpx.post(f"{keyed.url}/v1/predict", json={"inputs": x}, headers=KEY).status_code == 200
    time.sleep(0.5)
    pid = keyed.process.pid
    idle = _rss_mb(pid)
    peak, done = idle, threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_mb(pid))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        answers = asyncio.run(_keyless_flood(_address(keyed), 120, 4 * 2**20))
    finally:
        done.set()
        watcher.join()
    # the gate read up to 4 MiB of each body before it checked the key: +480 MB and more
    assert peak < 1.5 * idle, f"RSS {idle:.0f} MB idle, {peak:.0f} MB under the flood"
    assert all(a == b"closed" or a.startswith(b"HTTP/1.1 401") for a in answers), set(answers)
    r = httpx.post(f"{keyed.url}/v1/predict", json={"inputs": x}, headers=KEY)
    assert r.status_code == 200  # and the server still answers those with the key


def test_connections_beyond_the_cap_get_503(keyed):
    x = {"inputs": toy_data(1, 0)[0].tolist()}
    held = []
    try:  # every connection allowed, each kept alive after a first request with the key
        for _ in range(MAX_CONNECTIONS):
            s = socket.create_connection(_address(keyed))
            held.append(s)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-API-Key: " + API_KEY.encode()
                      + b"\r\n\r\n")  # fmt: skip
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
        r = httpx.post(f"{keyed.url}/v1/predict", json=x, headers=KEY)
        assert r.status_code == 503, r.text
    finally:
        for s in held:
            s.close()
    time.sleep(0.2)
    assert httpx.post(f"{keyed.url}/v1/predict", json=x, headers=KEY).status_code == 200


def _drip(address: tuple[str, int], first: bytes, drop: bytes, every: float = 0.2,
          limit: float = 10.0) -> tuple[float, bytes]:  # fmt: skip
    """Send ``first``, then ``drop`` every ``every`` seconds until the server answers or
    closes: the seconds it took and what the server sent."""
    start = time.monotonic()
    with socket.create_connection(address) as s:
        s.settimeout(every)
        s.sendall(first)
        while time.monotonic() - start < limit:
            try:
                got = s.recv(4096)
                took = time.monotonic() - start
                while got:  # the rest of the answer (headers and body may come apart)
                    try:
                        more = s.recv(4096)
                    except (TimeoutError, OSError):
                        break
                    if not more:
                        break
                    got += more
                return took, got  # an answer, or b"" for closed
            except TimeoutError:
                pass
            except OSError:
                return time.monotonic() - start, b""
            try:
                s.sendall(drop)
            except OSError:
                return time.monotonic() - start, b""
    return time.monotonic() - start, b"still open"


def test_slow_header_and_slow_body_clients_are_dropped_in_time(keyed):
    address = _address(keyed)
    start = (b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nX-API-Key: " + API_KEY.encode() +
             b"\r\nContent-Type: application/json\r\n")  # fmt: skip
    clients = {
        "silent": (b"", b""),  # connects and never sends a byte
        "slow header": (start, b"X-Pad: 1\r\n"),  # a header line every 0.2 s, never the end
        "slow body": (start + b"Content-Length: 1000\r\n\r\n{", b" "),  # a body byte every 0.2 s
    }
    results: dict[str, tuple[float, bytes]] = {}

    def run(name: str) -> None:
        results[name] = _drip(address, *clients[name])

    threads = [threading.Thread(target=run, args=(n,)) for n in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, (seconds, got) in results.items():
        # (the upper bound leaves room for a loaded CI machine; without timeouts: never)
        assert TIMEOUT_S * 0.8 < seconds < TIMEOUT_S + 3, (name, seconds, got)
        assert got.startswith(b"HTTP/1.1 408"), (name, got)
    assert b"body not received within 1 s" in results["slow body"][1]


def test_oversized_headers_are_refused(keyed):
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 70_000 + b"\r\n\r\n"
    seconds, got = _drip(_address(keyed), big, b"")
    assert got.startswith(b"HTTP/1.1 400") and seconds < TIMEOUT_S, (seconds, got)
    assert httpx.get(f"{keyed.url}/healthz").status_code == 200


async def _post_then_sigterm(srv, body: bytes, clients: int, wait: float) -> list[bytes]:
    """``clients`` requests sent whole, then one sent only in part, SIGTERM ``wait`` seconds
    later, the rest of the last one once the server has stopped listening, and each raw answer
    (the connections are read to their end); the last one's answer comes last."""
    head = (f"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
    streams = [await asyncio.open_connection(*_address(srv)) for _ in range(clients + 1)]
    for _, writer in streams[:-1]:
        writer.write(head + body)
        await writer.drain()
    late = streams[-1][1]
    late.write(head[:30])
    await asyncio.sleep(wait)
    srv.process.send_signal(signal.SIGTERM)
    while True:  # the listening socket closes once shutdown has begun
        try:
            _, probe = await asyncio.open_connection(*_address(srv))
            probe.close()
            await asyncio.sleep(0.02)
        except OSError:
            break
    late.write(head[30:] + body)
    return list(await asyncio.gather(*(reader.read() for reader, _ in streams)))


def test_sigterm_under_load_answers_503_with_retry_after_never_500(toy_bundle, tmp_path):
    srv = start_server(toy_bundle, tmp_path / "log", "--grace-period", "1", "--max-samples",
                       "100000", "--batch-rows", "0")  # fmt: skip
    heavy = json.dumps({"inputs": toy_data(256, 5)[0].tolist(), "samples": 300}).encode()
    try:
        start = time.monotonic()
        answers = asyncio.run(_post_then_sigterm(srv, heavy, 12, 0.5))
        assert srv.process.wait(60) in (0, -15)
    finally:
        stop_server(srv)
    took = time.monotonic() - start
    codes = [int(a.split()[1]) if a else 0 for a in answers]  # 0: closed without an answer
    assert set(codes) <= {200, 503}, (codes, srv.output())
    assert codes[-1] == 503  # a request that arrived after SIGTERM
    assert 503 in codes, (codes, took)  # 12 heavy passes take longer than the grace period
    for a in answers:
        if a.startswith(b"HTTP/1.1 503"):
            assert re.search(rb"(?i)\r\nretry-after: \d+\r\n", a), a
            assert b"shutting down" in a, a
    log = srv.output()
    assert "internal error" not in log and "Traceback" not in log, log
    assert "without an API key" not in log  # keyless but on loopback: no warning


def test_keyless_server_on_a_public_address_warns(toy_bundle, tmp_path):
    srv = start_server(toy_bundle, tmp_path / "log", "--host", "0.0.0.0", wait=False)
    try:
        deadline = time.monotonic() + 120
        while "serving toy" not in srv.output() and time.monotonic() < deadline:
            assert srv.process.poll() is None, srv.output()
            time.sleep(0.1)
    finally:
        stop_server(srv)
    said = " ".join(srv.output().split())
    assert "warning: serving without an API key on 0.0.0.0" in said, said


def test_serve_without_the_server_packages_fails_in_one_line(toy_bundle, tmp_path):
    stub = tmp_path / "stub" / "uvicorn"
    stub.mkdir(parents=True)  # an uvicorn that is not there, as without the [serve] extra
    (stub / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'uvicorn'\", name='uvicorn')\n"
    )
    import os

    env = {**os.environ, "PYTHONPATH": f"{stub.parent}:{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([cli_path(), "serve", str(toy_bundle)], capture_output=True,
                         text=True, timeout=120, env=env)  # fmt: skip
    said = (out.stdout + out.stderr).strip()
    assert out.returncode == 2, said
    assert len(said.splitlines()) == 1 and 'pip install -e ".[serve]"' in said, said
    assert "uvicorn" in said and "Traceback" not in said


def test_docs_work_offline(keyed):
    for page in ("/docs", "/redoc"):
        r = httpx.get(keyed.url + page)  # open without the key, as the probes are
        assert r.status_code == 200, r.text
        urls = re.findall(r"""(?:src|href|url)\s*[=:]\s*['"]([^'"]+)['"]""", r.text)
        assert urls and not [u for u in urls if "//" in u], urls  # nothing from elsewhere
        for u in urls:
            if u.startswith("/docs/static/"):
                asset = httpx.get(keyed.url + u)
                assert asset.status_code == 200 and len(asset.content) > 1000, u


def test_model_card_stays_small(toy_bundle, tmp_path):
    """/v1/model gives no raw calibration scores and one served ``samples`` figure."""
    import json as _json

    from bayesify import load
    from bayesify.posthoc.conformal import calibrate_conformal
    from bayesify.serve.model import ServedModel

    method = load(toy_bundle)
    calibrate_conformal(method, toy_data(2000, 7), samples=8)
    method.save(tmp_path / "conformal")
    card = ServedModel.load(str(tmp_path / "conformal"), default_samples=16).card()
    text = _json.dumps(card)
    assert len(text) < 4000, len(text)  # the 2,000 scores alone were over 30 kB
    conformal = card["metadata"]["conformal"]
    assert conformal["n_scores"] == 2000 and conformal["calibration_samples"] == 8
    assert "scores" not in conformal and "deferral" not in card["metadata"]
    assert card["deferral"]["threshold"] > 0  # the policy, given once
    assert re.findall(r'"(\w*samples\w*)":', text).count("samples") == 1, text
    assert card["sampling"] == {"mode": "fixed", "samples": 16}
