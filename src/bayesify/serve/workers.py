"""``bayesify serve --workers N``: N server processes on one machine sharing one port.

The parent process binds the port (:func:`~bayesify.serve.listener.bind`, before anything is
announced) and runs no server itself: it starts N workers, each a fresh interpreter running
the same ``bayesify serve`` command (spawned, not forked: torch's thread pools do not survive a
fork), each inheriting the one listening socket, so the kernel hands every new connection to
whichever worker accepts it first (a connection stays with its worker for its life,
keep-alive included). Each worker is a whole server as :mod:`.listener` runs it: its own
header timeout, connection cap (``--max-connections`` and ``--reserved-connections`` hold per
worker: N workers hold up to N times as many connections), micro-batcher and monitor.

- **Start**: worker 0 first, the rest once it is ready (so a bad option or bundle is reported
  once, in its one line, and the parent exits with its code); a worker is ready once its
  server listens (it writes one byte to a pipe).
- **A worker that dies** (killed, crashed) is logged and replaced by a new one on the same
  socket; one that dies before it was ready is retried after 1, 2, 4 ... 30 s.
- **SIGTERM** (or SIGINT) to the parent: it stops listening and sends SIGTERM to every
  worker, each draining as one server does (``--grace-period``); workers still running
  ``grace + 10`` s later are killed.
- **The parent killed** (``kill -9``): each worker holds the read end of a pipe whose only
  write end is the parent's; at its end of file the worker stops itself as on SIGTERM. The
  metrics folder the parent made is then left in the temporary directory.
- **Metrics**: the workers write prometheus_client's multiprocess files in one folder
  (``PROMETHEUS_MULTIPROC_DIR``: a fresh temporary one, or the caller's, emptied at start) and
  any worker's ``/metrics`` reads them all (:mod:`.metrics`); a dead worker's live gauges are
  removed (``mark_process_dead``).
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

#: set in a worker's environment: "INDEX/COUNT:LISTEN_FD:READY_FD:LIFELINE_FD"
WORKER_ENV = "BAYESIFY_SERVE_WORKER"
#: prometheus_client's multiprocess folder, read when it is first imported
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: seconds workers may take to drain beyond the grace period before they are killed
KILL_AFTER_GRACE_S = 10.0
_RETRY_S, _RETRY_MAX_S = 1.0, 30.0


@dataclass
class Worker:
    """This process as one of ``count`` workers: the inherited socket and its pipes."""

    index: int
    count: int
    sock: socket.socket
    ready_fd: int
    lifeline_fd: int

    def ready(self) -> None:
        """Tell the parent this worker's server listens."""
        try:
            os.write(self.ready_fd, b"1")
        finally:
            os.close(self.ready_fd)

    def watch_parent(self) -> None:
        """Stop this worker as SIGTERM does when the parent is gone (its lifeline closes)."""

        def wait() -> None:
            while os.read(self.lifeline_fd, 64):
                pass
            log.warning("worker %d: the parent process is gone; stopping", self.index)
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=wait, name="lifeline", daemon=True).start()


def this_worker() -> Worker | None:
    """The worker this process is (from its environment), or None for a plain server."""
    spec = os.environ.get(WORKER_ENV)
    if not spec:
        return None
    who, listen_fd, ready_fd, lifeline_fd = spec.split(":")
    index, count = map(int, who.split("/"))
    sock = socket.socket(fileno=int(listen_fd))
    return Worker(index, count, sock, int(ready_fd), int(lifeline_fd))


def worker_index() -> str | None:
    """This worker's index as text (the ``worker`` label of its metrics), None outside one."""
    spec = os.environ.get(WORKER_ENV)
    return spec.split("/", 1)[0] if spec else None


@dataclass
class _Child:
    index: int
    process: subprocess.Popen
    ready_fd: int  # read end
    started: float
    ready: bool = False


@dataclass
class Supervisor:
    """Runs ``command`` (a ``bayesify serve`` command line) as ``count`` workers on ``sock``."""

    command: list[str]
    sock: socket.socket
    count: int
    grace: float
    metrics_dir: str | None = None
    children: dict[int, _Child] = field(default_factory=dict)
    _stopping: bool = False
    _failures: dict[int, int] = field(default_factory=dict)
    _retry_at: dict[int, float] = field(default_factory=dict)

    def run(self) -> int:
        """Start the workers, keep them running until SIGTERM or SIGINT; the exit code."""
        own_dir = self.metrics_dir is None
        folder = Path(self.metrics_dir or tempfile.mkdtemp(prefix="bayesify-metrics-"))
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.db"):  # a previous server's counts are not this one's
            stale.unlink()
        self.metrics_dir = str(folder)
        lifeline_r, self._lifeline = os.pipe()
        self._lifeline_r = lifeline_r
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        try:
            code = self._start_all()
            if code is None:
                self._watch()
                code = 0
            return code
        finally:
            self._shutdown()
            os.close(lifeline_r)
            os.close(self._lifeline)
            if own_dir:
                shutil.rmtree(folder, ignore_errors=True)

    # ------------------------------------------------------------------ signals
    def _stop(self, signum: int, _frame: object) -> None:
        if not self._stopping:
            log.info("%s: stopping %d workers", signal.Signals(signum).name, self.count)
        self._stopping = True

    # ------------------------------------------------------------------ workers
    def _spawn(self, index: int) -> _Child:
        ready_r, ready_w = os.pipe()
        fds = (self.sock.fileno(), ready_w, self._lifeline_r)
        env = {**os.environ, MULTIPROC_ENV: str(self.metrics_dir),
               WORKER_ENV: f"{index}/{self.count}:" + ":".join(map(str, fds))}  # fmt: skip
        try:
            process = subprocess.Popen(self.command, env=env, pass_fds=fds)
        finally:
            os.close(ready_w)
        log.info("worker %d started (pid %d)", index, process.pid)
        child = _Child(index, process, ready_r, time.monotonic())
        self.children[index] = child
        return child

    def _wait_ready(self, children: list[_Child]) -> int | None:
        """Until every child is ready: None, or the exit code of one that died first."""
        waiting = {c.ready_fd: c for c in children}
        while waiting and not self._stopping:
            readable, _, _ = select.select(list(waiting), [], [], 0.2)
            for fd in readable:
                child = waiting.pop(fd)
                if os.read(fd, 1):
                    child.ready = True
                    log.info("worker %d ready (pid %d)", child.index, child.process.pid)
                else:  # closed unready: it exits
                    return child.process.wait()
            for child in waiting.values():
                if (code := child.process.poll()) is not None:
                    return code
        return None

    def _start_all(self) -> int | None:
        """Worker 0, then the others; None once all are ready, else an exit code."""
        first = self._spawn(0)
        code = self._wait_ready([first])
        if code is None and not self._stopping:
            code = self._wait_ready([self._spawn(i) for i in range(1, self.count)])
        if code is not None:
            return code
        if not self._stopping:
            host, port = self.sock.getsockname()[:2]
            pids = ", ".join(str(c.process.pid) for c in self.children.values())
            log.info("%d workers serving on %s:%d (pids %s)", self.count, host, port, pids)
        return None

    def _watch(self) -> None:
        """Replace workers that die, until a signal stops them all."""
        while not self._stopping:
            fds = {c.ready_fd: c for c in self.children.values() if not c.ready}
            readable, _, _ = select.select(list(fds), [], [], 0.2)
            for fd in readable:
                child = fds[fd]
                if os.read(fd, 1):
                    child.ready = True
                    self._failures.pop(child.index, None)
                    log.info("worker %d ready (pid %d)", child.index, child.process.pid)
            for child in list(self.children.values()):
                if self._stopping or (code := child.process.poll()) is None:
                    continue
                self._bury(child)
                self._note_death(child, code)
            now = time.monotonic()
            for index, at in list(self._retry_at.items()):
                if now >= at and not self._stopping:
                    del self._retry_at[index]
                    self._spawn(index)

    def _note_death(self, child: _Child, code: int) -> None:
        why = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        if child.ready:
            log.warning("worker %d (pid %d) died (%s); starting another", child.index,
                        child.process.pid, why)  # fmt: skip
            self._retry_at[child.index] = time.monotonic()
            return
        failures = self._failures[child.index] = self._failures.get(child.index, 0) + 1
        delay = min(_RETRY_MAX_S, _RETRY_S * 2 ** (failures - 1))
        log.warning("worker %d (pid %d) died before it was ready (%s); next try in %.0f s",
                    child.index, child.process.pid, why, delay)  # fmt: skip
        self._retry_at[child.index] = time.monotonic() + delay

    def _bury(self, child: _Child) -> None:
        """Forget a child that exited: its pipe, and its live gauges in the metrics folder."""
        from prometheus_client.multiprocess import mark_process_dead

        os.close(child.ready_fd)
        self.children.pop(child.index, None)
        mark_process_dead(child.process.pid, self.metrics_dir)

    def _shutdown(self) -> None:
        """SIGTERM to every worker (each drains), then kill those left after the grace."""
        self.sock.close()  # the workers' copies close as they stop: the port is then free
        alive = list(self.children.values())
        for child in alive:
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace + KILL_AFTER_GRACE_S
        for child in alive:
            try:
                child.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker %d (pid %d) still running after the grace period; killed",
                            child.index, child.process.pid)  # fmt: skip
                child.process.kill()
                child.process.wait()
            self._bury(child)
