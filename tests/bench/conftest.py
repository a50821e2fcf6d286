"""A real Dask cluster on the loopback address for the ``--cluster`` tests: ``dask scheduler``
and two ``dask worker --nworkers 1 --nthreads 1`` processes (each a nanny and its worker), on
free ports, killed (their whole process groups) when the module's tests are done."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from bayesify.bench.process import free_port


@dataclass
class LocalDask:
    address: str
    processes: list[subprocess.Popen]
    logs: Path

    def output(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.logs.glob("*.log")))

    def stop(self) -> None:
        """SIGKILL every process group (scheduler, nannies, workers): nothing to save."""
        for proc in self.processes:
            with contextlib.suppress(ProcessLookupError):  # the group may have exited already
                os.killpg(proc.pid, signal.SIGKILL)  # a nanny's worker too
            proc.wait()


def start_local_dask(folder: Path, workers: int = 2, timeout: float = 60) -> LocalDask:
    """Start the scheduler and ``workers`` workers; returns once all have joined."""
    distributed = pytest.importorskip("distributed")
    dask = str(Path(sys.executable).parent / "dask")
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    here = Path(__file__).resolve().parent  # cluster_jobs.py, the toy job
    path = os.pathsep.join([str(here.parents[1] / "src"), str(here)])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    folder.mkdir(parents=True, exist_ok=True)
    commands = [[dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard",
                 "--idle-timeout", "300s"]]  # fmt: skip
    commands += [[dask, "worker", address, "--nworkers", "1", "--nthreads", "1", "--host",
                  "127.0.0.1", "--no-dashboard", "--death-timeout", "60", "--name", f"w{i}",
                  "--local-directory", str(folder / f"w{i}")] for i in range(workers)]  # fmt: skip
    processes = []
    for i, cmd in enumerate(commands):
        with open(folder / f"{i}.log", "w") as log:
            processes.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                              start_new_session=True))  # fmt: skip
    cluster = LocalDask(address, processes, folder)
    try:
        with distributed.Client(address, timeout=timeout, set_as_default=False) as client:
            client.wait_for_workers(workers, timeout=timeout)
    except BaseException:
        cluster.stop()
        raise RuntimeError(f"the local Dask cluster did not start:\n{cluster.output()}") from None
    return cluster


@pytest.fixture(scope="module")
def local_dask(tmp_path_factory):
    cluster = start_local_dask(tmp_path_factory.mktemp("dask"))
    yield cluster
    cluster.stop()
