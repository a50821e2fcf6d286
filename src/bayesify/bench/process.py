"""A ``bayesify serve`` process on a free loopback port: started, waited for, stopped.

Used by ``bayesify bench serve`` and the server tests, which both talk to a real process (it
starts the CLI, so it imports nothing of the server).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


#: starts the server's process, with ``subprocess.Popen``'s signature; the test suite puts a
#: fork server in its place (tests/forkserver.py)
launch: Callable[..., subprocess.Popen[Any]] = subprocess.Popen


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
    log = Path(log)
    named = ["--name", name] if name is not None else []
    if "--store" not in args:
        record = log.with_name(log.name + ".record.sqlite3")
        for leftover in (record, Path(f"{record}-wal"), Path(f"{record}-shm")):
            leftover.unlink(missing_ok=True)
        args = (*args, "--store", str(record))
    environ = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    for attempt in range(PORT_ATTEMPTS):
        port = free_port()
        cmd = [cli_path(), "serve", str(bundle), *named, "--port", str(port), *args]
        with log.open("w") as out:
            proc = launch(cmd, stdout=out, stderr=subprocess.STDOUT, env=environ)
        server = ServerProcess(f"http://127.0.0.1:{port}", proc, Path(bundle), name or "", log)
        if not wait:
            return server
        try:
            return _ready(server, port, timeout)
        except RuntimeError:
            taken = "address already in use" in server.output().lower()
            if not taken or attempt == PORT_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


#: starts on a new free port when another process took the last one first
PORT_ATTEMPTS = 3


def _ready(server: ServerProcess, port: int, timeout: float) -> ServerProcess:
    """``server`` once ``/v2/health/ready`` answers 200 from it: the answering process must be
    the one started, holding the port, since between :func:`free_port` and the server's bind
    another process may take the port (two test processes starting servers at once), and its
    server would answer in this one's place. A ``RuntimeError`` with the log if it exits or
    times out."""
    proc = server.process
    deadline = time.monotonic() + timeout
    # one client for every poll: a new one per request builds a TLS context, ~40 ms of CPU,
    # which polling every 50 ms would take from the starting server
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}: {server.output()}")
            try:
                ready = client.get(f"{server.url}/v2/health/ready").status_code == 200
            except httpx.HTTPError:
                ready = False
            if ready and listens(proc.pid, port):
                return server
            time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"server not ready after {timeout:.0f} s: {server.output()}")


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a listening TCP socket on ``port`` (Linux's /proc: its
    socket inodes against /proc/net/tcp and tcp6; True where /proc cannot tell)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return not Path("/proc/self/fd").is_dir()  # no /proc here: cannot tell
    inodes = set()
    for fd in fds:
        with contextlib.suppress(OSError):  # closed meanwhile
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()  # sl, local address:port (hex), remote, state, ... inode
                if (int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A"
                        and fields[9] in inodes):  # fmt: skip
                    return True
    return False
