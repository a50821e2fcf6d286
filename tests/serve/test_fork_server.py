"""The tests' fork server (tests/forkserver.py) starts a ``bayesify`` command as a real process
that behaves as the script does: the same output and exit status, the working folder and
environment given, signals reported as ``Popen`` reports them; a command it cannot fork
faithfully starts as a plain process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest
from forkserver import ForkedProcess

from bayesify.bench.process import cli_path

from .conftest import API_KEY, start_server


@pytest.fixture
def forks(fork_server):
    if fork_server is None:
        pytest.skip("FORK_SERVER=0: no fork server")
    return fork_server


def _run(popen, cmd: list[str], log) -> tuple[object, str]:
    with log.open("w") as out:
        proc = popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    proc.wait(120)
    return proc, log.read_text()


def test_a_forked_command_answers_as_the_script_does(forks, tmp_path):
    for i, args in enumerate((["--version"], ["serve", str(tmp_path)])):
        cmd = [cli_path(), *args]
        forked, forked_out = _run(forks.popen, cmd, tmp_path / f"fork{i}.log")
        plain, plain_out = _run(subprocess.Popen, cmd, tmp_path / f"plain{i}.log")
        assert isinstance(forked, ForkedProcess) and isinstance(plain, subprocess.Popen)
        assert forked.returncode == plain.returncode and forked_out == plain_out


def test_only_commands_whose_imports_see_the_same_environment_are_forked(forks):
    cmd = [cli_path(), "serve", "b"]
    assert forks.forkable(cmd, {**os.environ, "BAYESIFY_API_KEY": "k"})
    assert not forks.forkable(cmd, {**os.environ, "OMP_NUM_THREADS": "7"})
    assert not forks.forkable(cmd, {**os.environ, "PROMETHEUS_MULTIPROC_DIR": "/tmp"})
    assert not forks.forkable([sys.executable, "-c", "pass"], None)


def test_a_forked_server_has_its_folder_key_and_exit_status(forks, toy_bundle, tmp_path,
                                                            monkeypatch):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    srv = start_server(toy_bundle, tmp_path / "server.log", env={"BAYESIFY_API_KEY": API_KEY})
    try:
        assert isinstance(srv.process, ForkedProcess) and srv.process.poll() is None
        assert os.readlink(f"/proc/{srv.process.pid}/cwd") == str(tmp_path)
        assert httpx.get(f"{srv.url}/v2/models/toy").status_code == 401
        ok = httpx.get(f"{srv.url}/v2/models/toy", headers={"X-API-Key": API_KEY})
        assert ok.status_code == 200, ok.text
        srv.process.send_signal(signal.SIGKILL)
        assert srv.process.wait(60) == -signal.SIGKILL == srv.process.poll()
    finally:
        srv.stop()
