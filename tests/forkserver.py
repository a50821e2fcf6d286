"""Start ``bayesify`` CLI processes for the tests from a fork server: one process per pytest
process that has imported torch and the server's packages once, and forks a child for each
command. The child is a real process of its own (its pid, its port, its exit status), running
the CLI's ``main`` exactly as the ``bayesify`` script does, minus the ~3 s of interpreter start
and imports each ``bayesify serve`` would otherwise spend.

A command whose environment changes what a module reads at import (``OMP_NUM_THREADS``,
``PROMETHEUS_MULTIPROC_DIR``, ...) or that is not the ``bayesify`` script starts as a plain
``subprocess.Popen``. Run as a script, this file is the fork server itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

#: environment variables read only when a command runs, not at import: a command may set these
#: and still be forked from the server's imports
RUNTIME_ENV = frozenset({"BAYESIFY_API_KEY", "PYTHONUNBUFFERED"})

#: what every ``bayesify serve`` imports before it loads a bundle, and what many import on
#: first use: ``torch._dynamo`` (building some layers on the meta device, training), pandas
#: (table inputs), ``pydantic.v1`` (FastAPI's routes look for v1 models)
PRELOAD = ("torch", "bayesify.cli", "bayesify.cli.serve", "bayesify.serve.app",
           "bayesify.serve.listener", "bayesify.serve.model", "bayesify.serve.repository",
           "bayesify.methods", "torch._dynamo", "pandas", "pydantic.v1")  # fmt: skip


class ForkedProcess:
    """A child of the fork server, with the part of :class:`subprocess.Popen` the tests use:
    ``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``. Its
    exit status comes over ``conn`` from the fork server, which reaps it."""

    def __init__(self, conn: socket.socket, args: list[str]) -> None:
        self.conn, self.args = conn, args
        self.pid: int = self._message(None)["pid"]
        self.returncode: int | None = None

    def _message(self, timeout: float | None) -> dict[str, Any]:
        ready, _, _ = select.select([self.conn], [], [], timeout)
        if not ready:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        line = b""
        while not line.endswith(b"\n"):
            chunk = self.conn.recv(1)
            if not chunk:
                raise RuntimeError(f"the fork server closed its connection: {line!r}")
            line += chunk
        return json.loads(line)

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.wait(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = int(self._message(timeout)["rc"])
            self.conn.close()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The fork server of this pytest process, started on first use."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "fork.sock"
        self.log = folder / "forkserver.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log.open("w") as log:
            cmd = [sys.executable, __file__, str(self.path)]
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while not self.path.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fork server did not start: {self.log.read_text()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()

    def forkable(self, cmd: list[str], env: dict[str, str] | None) -> bool:
        """Whether ``cmd`` runs the ``bayesify`` script in an environment that differs from
        the fork server's only in :data:`RUNTIME_ENV`."""
        if Path(cmd[0]).name != "bayesify" or Path(cmd[0]).parent != Path(sys.executable).parent:
            return False
        env = dict(os.environ if env is None else env)
        base = {**os.environ, "PYTHONUNBUFFERED": "1"}
        changed = {k for k in env.keys() | base.keys() if env.get(k) != base.get(k)}
        return changed <= RUNTIME_ENV

    def popen(self, cmd: list[str], stdout: IO[Any] | int | None = None,
              stderr: IO[Any] | int | None = None, env: dict[str, str] | None = None,
              **kw: Any) -> Any:  # fmt: skip
        """``subprocess.Popen(cmd, stdout=..., stderr=..., env=...)``, forked where it can be."""
        if kw or not self.forkable(cmd, env) or not _file(stdout) or not _file(stderr, stdout):
            return subprocess.Popen(cmd, stdout=stdout, stderr=stderr, env=env, **kw)
        if self.process is None or self.process.poll() is not None:
            self.start()
        out = stdout.fileno()  # type: ignore[union-attr]
        err = out if stderr == subprocess.STDOUT else stderr.fileno()  # type: ignore[union-attr]
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(str(self.path))
        request = {"argv": cmd, "env": dict(os.environ if env is None else env), "cwd": os.getcwd()}
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [out, err])
        return ForkedProcess(conn, cmd)


def _file(stream: object, stdout: object = None) -> bool:
    """Whether ``stream`` is an open file (or ``STDOUT`` after a file ``stdout``)."""
    if stream == subprocess.STDOUT:
        return stdout is not None and _file(stdout)
    return hasattr(stream, "fileno")


def _serve(path: str) -> dict[str, Any]:
    """The fork server's loop: accept a request, fork, answer the child's pid, and its exit
    status once reaped. Returns only in a child, with its request."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: end with the pytest process
    for name in PRELOAD:
        __import__(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(16)
    os.rename(path + ".tmp", path)
    children: dict[int, socket.socket] = {}
    while True:
        ready, _, _ = select.select([listener], [], [], 0.02)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = children.pop(pid)
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps({"rc": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
            conn.close()
        if not ready:
            continue
        conn, _ = listener.accept()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 2)
        while not message.endswith(b"\n"):
            message += conn.recv(1 << 20)
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            listener.close()
            for other in children.values():
                other.close()
            conn.close()
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            for fd in (*fds, devnull):
                os.close(fd)
            return request
        for fd in fds:
            os.close(fd)
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        children[pid] = conn


if __name__ == "__main__":
    job = _serve(sys.argv[1])
    sys.path[0] = str(Path(job["argv"][0]).parent)  # where the bayesify script runs from
    import random

    import numpy as np

    random.seed()  # a fresh interpreter's entropy, not the server's state
    np.random.seed()
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    sys.argv = list(job["argv"])
    from bayesify.cli import main

    sys.exit(main())
