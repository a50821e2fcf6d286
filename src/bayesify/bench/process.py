"""A ``bayesify serve`` process on a free loopback port: started, waited for, stopped.

Used by ``bayesify bench serve`` and the server tests, which both talk to a real process (it
starts the CLI, so it imports nothing of the server).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_path() -> str:
    """The ``bayesify`` script of this Python environment."""
    return str(Path(sys.executable).parent / "bayesify")


@dataclass
class ServerProcess:
    url: str
    process: subprocess.Popen
    bundle: Path
    name: str
    log: Path

    def output(self) -> str:
        return self.log.read_text()

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (graceful: requests in flight are finished), then kill after ``timeout``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_server(
    bundle: str | Path,
    log: str | Path,
    *args: str,
    name: str | None = "model",
    env: dict[str, str] | None = None,
    wait: bool = True,
    timeout: float = 180,
) -> ServerProcess:
    """Start ``bayesify serve BUNDLE --name NAME --port P ARGS`` (``name`` None: no ``--name``,
    e.g. for a folder of bundles); with ``wait``, return once ``/v2/health/ready`` answers 200
    (a ``RuntimeError`` with the log if it exits or times out). Unless ``args`` name a
    ``--store``, the server's record is a new file beside its log (``LOG.record.sqlite3``),
    never the one beside the bundle: each run starts from an empty record."""
    port = free_port()
    log = Path(log)
    named = ["--name", name] if name is not None else []
    if "--store" not in args:
        record = log.with_name(log.name + ".record.sqlite3")
        for leftover in (record, Path(f"{record}-wal"), Path(f"{record}-shm")):
            leftover.unlink(missing_ok=True)
        args = (*args, "--store", str(record))
    cmd = [cli_path(), "serve", str(bundle), *named, "--port", str(port), *args]
    environ = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=environ)
    server = ServerProcess(f"http://127.0.0.1:{port}", proc, Path(bundle), name or "", log)
    if not wait:
        return server
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {server.output()}")
        try:
            if httpx.get(f"{server.url}/v2/health/ready", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"server not ready after {timeout:.0f} s: {server.output()}")
