"""Shared by every test process:

* each ``bayesify serve`` the tests start through :mod:`bayesify.bench.process` is forked from
  one fork server per pytest process (tests/forkserver.py), which has imported torch and the
  server once (``FORK_SERVER=0``: plain processes instead);
* JAX keeps what it compiles in one folder for the whole run (both xdist workers and the
  processes they start), so the HMC references of identical shapes compile once;
* ``httpx.get``/``post`` share one TLS context (a new one costs ~40 ms of CPU per request).
"""

from __future__ import annotations

import functools
import os
import sys

import pytest
from forkserver import ForkServer

from bayesify.bench import process


@pytest.fixture(scope="session", autouse=True)
def fork_server(tmp_path_factory):
    if os.environ.get("FORK_SERVER") == "0":
        yield None
        return
    server = ForkServer(tmp_path_factory.mktemp("fork"))
    launch, process.launch = process.launch, server.popen
    yield server
    process.launch = launch
    server.stop()


@pytest.fixture(scope="session", autouse=True)
def jax_cache(tmp_path_factory):
    run = tmp_path_factory.getbasetemp()
    folder = (run.parent if "PYTEST_XDIST_WORKER" in os.environ else run) / "jax-cache"
    settings = {"JAX_COMPILATION_CACHE_DIR": str(folder),
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": 0.0,
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": -1}  # fmt: skip
    os.environ.update({k: str(v) for k, v in settings.items()})  # for the processes started
    if "jax" in sys.modules:  # imported while collecting: set before its first compilation
        import jax

        for key, value in settings.items():
            jax.config.update(key.lower(), value)
    yield folder


@pytest.fixture(scope="session", autouse=True)
def one_tls_context():
    """``httpx.get``/``post`` build a client, and with it a TLS context from certifi's bundle
    (about 40 ms of CPU), for each request; the suite's plain-HTTP loopback requests share
    one context instead."""
    from httpx._transports import default

    build = default.create_ssl_context
    default.create_ssl_context = functools.lru_cache(maxsize=8)(build)
    yield
    default.create_ssl_context = build
