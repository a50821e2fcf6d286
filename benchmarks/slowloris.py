"""Slow-header siege of a real ``bayesify serve`` process with an API key: ATTACKERS clients
from 127.0.0.2 trickle a header line every 0.5 s and reconnect at once whenever answered (408
at the header timeout, 503 when they give way), while a keyed client from 127.0.0.3 sends
REQUESTS requests, each on a new connection. Loopback only; bounded by SECONDS. Extra
arguments go to ``bayesify serve`` (e.g. ``--max-connections 256``).

    python benchmarks/slowloris.py BUNDLE [ATTACKERS] [SECONDS] [REQUESTS] [SERVE ARGS...]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from bayesify.bench.machine import machine_description
from bayesify.bench.process import start_server
from bayesify.bench.serve.slow_clients import siege

KEY = "siege-key"


def main(bundle: str, attackers: int = 300, seconds: float = 40, requests: int = 60,
         *serve_args: str) -> None:  # fmt: skip
    log = Path(tempfile.mkdtemp()) / "server.log"
    srv = start_server(bundle, log, "--threads", "1", *serve_args, env={"BAYESIFY_API_KEY": KEY})
    try:
        host, port = srv.url.removeprefix("http://").split(":")
        report = asyncio.run(siege(host, int(port), KEY, attackers=attackers, seconds=seconds,
                                   requests=requests, drip=0.5, warmup=3.0))  # fmt: skip
    finally:
        srv.stop()
    print(machine_description())
    print(f"{attackers} attackers, {seconds:g} s, serve args {list(serve_args)}")
    print(report.line())


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], *(int(x) for x in a[1:4]), *a[4:])
