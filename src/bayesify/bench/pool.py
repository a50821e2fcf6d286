"""The processes a run's jobs (:class:`~bayesify.bench.engines.LocalPool`) and a search's
trials run in, on this machine.

Workers are forked from multiprocessing's fork server where the platform has one: the server
imports :data:`PRELOAD` once per run, so a worker starts in a fraction of a second instead of
importing torch and the training code again (3–5 CPU-seconds each). The fork server lives as
long as the process that started it, so a worker reads the environment variables that process
had when its first pool started; ``spawn`` starts each worker as a fresh interpreter with the
environment of the moment.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from multiprocessing.context import BaseContext

#: start methods a run may ask for
START_METHODS = ("forkserver", "spawn")
#: what every job or trial imports before it trains (``torch._dynamo``: torch's optimizers
#: import it on first use, about 2 s)
PRELOAD = ["bayesify.bench.jobs", "bayesify.methods", "torch._dynamo"]


def default_start_method() -> str:
    """``forkserver`` where this platform has it, else ``spawn``."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def start_method_of(start_method: str = "") -> str:
    """``start_method`` checked (``""``: :func:`default_start_method`); a ``ValueError`` naming
    the choices otherwise."""
    method = start_method or default_start_method()
    if method not in START_METHODS:
        raise ValueError(f"start_method must be one of {', '.join(START_METHODS)}, got {method!r}")
    return method


def worker_context(start_method: str = "") -> BaseContext:
    """The multiprocessing context workers start from (``""``: :func:`default_start_method`)."""
    method = start_method_of(start_method)
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(PRELOAD)
    return context


def exit_with_run(run: int, every: float = 1.0) -> None:
    """In a worker: stop once the run (pid ``run``) that started it is gone (killed with
    SIGTERM or SIGKILL, which do not reach the workers): an orphan would go on training jobs
    nobody waits for. The worker's parent is the run (spawn) or the run's fork server, which
    ends when the run does; either way the worker is re-parented when its parent ends. The row
    in progress stays ``running`` and is rerun by the next run."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent and (parent == run or _alive(run)):
            time.sleep(every)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-run", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True
