"""``bayesify serve`` announces a port only once it holds it: a port in use is its one line
(exit 2, no "serving"), and the address it prints is the one bound (``--port 0``: the free port
the system chose). Starting needs no scipy (its import is half a second of every start-up)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from bayesify.bench.process import cli_path


def _serve(bundle, *args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "300"}
    return subprocess.Popen([cli_path(), "serve", str(bundle), "--threads", "1", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, **kw)  # fmt: skip


def test_a_port_in_use_is_the_one_message(toy_bundle):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _serve(toy_bundle, "--port", str(port))
        out, _ = proc.communicate(timeout=180)
    lines = [line for line in out.splitlines() if line.strip()]
    # before: "serving toy (...) on http://127.0.0.1:PORT/", then uvicorn's error, exit 1
    assert proc.returncode == 2, out
    assert len(lines) == 1, out
    assert re.fullmatch(rf"error: cannot listen on 127\.0\.0\.1:{port}: address already in use",
                        lines[0].strip(), flags=re.IGNORECASE), out  # fmt: skip


def test_the_address_announced_is_the_one_bound(toy_bundle):
    proc = _serve(toy_bundle, "--port", "0")
    try:
        line = proc.stdout.readline()
        m = re.search(r"serving toy \(.*\) on http://127\.0\.0\.1:(\d+)/", line)
        assert m and m.group(1) != "0", line  # before: port 0, where nothing listens
        url = f"http://127.0.0.1:{m.group(1)}"
        deadline = time.monotonic() + 60
        while True:  # bound before the announcement; answering once the app has started
            try:
                assert httpx.get(f"{url}/healthz", timeout=2).status_code == 200
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        maps = Path(f"/proc/{proc.pid}/maps")
        if not maps.exists():
            pytest.skip("no /proc here to list a process's libraries")
        # scipy's compiled modules would be mapped into the process once imported
        assert "/scipy/" not in maps.read_text(), "a start-up imported scipy"
    finally:
        proc.terminate()
        proc.wait(30)
