"""A real PostgreSQL server for the record's tests: the system's ``initdb`` and ``pg_ctl``
(on PATH, or Debian's /usr/lib/postgresql/<v>/bin), a fresh data folder, a free loopback port,
stopped afterwards. As root the server runs as user ``nobody`` (PostgreSQL refuses root).
Without the system's binaries, the pip package pgserver's server, if installed; else the tests
are skipped, saying so."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from bayesify.bench.process import free_port


def _binaries() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: int(Path(p).parts[-3]))  # fmt: skip
    return Path(versions[-1]).parent if versions else None


@contextmanager
def running_postgres() -> Iterator[str]:
    """A PostgreSQL server's URL while it runs (the test is skipped, saying why, when none can
    be started here)."""
    pytest.importorskip("psycopg", reason='the postgres extra: pip install -e ".[postgres]"')
    bin_dir = _binaries()
    if bin_dir is None:
        with _pip_server() as url:
            yield url
        return
    as_user: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: PostgreSQL cannot start as root")
        as_user = ["runuser", "-u", "nobody", "--"]
    folder = Path(tempfile.mkdtemp(prefix="bayesify-pg-"))  # not under pytest's root-only tmp
    data = folder / "data"
    if as_user:
        shutil.chown(folder, "nobody")

    def run(*cmd: str) -> None:
        done = subprocess.run([*as_user, *cmd], capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed: {done.stdout}{done.stderr}")

    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
            "--no-sync")  # fmt: skip
        for attempt in range(3):  # a free port can be taken before the server binds it
            port = free_port()
            options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
            try:
                run(str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l",
                    str(folder / "server.log"), "-w", "start")  # fmt: skip
                break
            except RuntimeError:
                log = (folder / "server.log").read_text(errors="replace")
                if attempt == 2 or "could not bind" not in log:
                    raise
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def _pip_server() -> Iterator[str]:
    """Without the system's binaries: the server of the pip package pgserver, if installed."""
    try:
        import pgserver
    except ModuleNotFoundError:
        pytest.skip("no PostgreSQL server: neither the system's binaries (initdb, pg_ctl; "
                    "apt-get install postgresql) nor the pip package pgserver")  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="bayesify-pgserver-"))
    server = pgserver.get_server(folder, cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def fresh_database(url: str, name: str) -> str:
    """A new empty database on the server at ``url``: its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
