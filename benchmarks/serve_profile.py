"""Where a served request's CPU goes: a real ``bayesify serve`` process (adaptive sampling 8-32,
tol 0.03, micro-batching on, one thread) under C closed-loop clients of single-image requests,
sampled by py-spy (``pip install --target DIR py-spy``; not a bayesify dependency), then the
share of samples per function (inclusive, idle time left out):

    python benchmarks/serve_profile.py BUNDLE OUT.txt CLIENTS REQUESTS SECONDS [PY_SPY]
"""

from __future__ import annotations

import asyncio
import collections
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bayesify.bench.process import start_server
from bayesify.bench.serve.command import _request_bodies
from bayesify.bench.serve.http_load import closed_loop, post_request


def shares(raw: Path, top: int = 40) -> list[str]:
    """Inclusive share of py-spy's raw (collapsed) samples per function, largest first."""
    total, counts = 0, collections.Counter()
    for line in raw.read_text().splitlines():
        stack, n = line.rsplit(" ", 1)
        total += int(n)
        frames = stack.split(";")
        names = {frames[0].split(":")[0]} | {re.sub(r":\d+\)$", ")", f) for f in frames[1:]}
        for name in names:
            counts[name] += int(n)
    return [f"{100 * v / total:5.1f} % {k}" for k, v in counts.most_common(top)]


def main(bundle: str, out: str, clients: int, requests: int, seconds: int, spy: str) -> None:
    server = start_server(Path(bundle), Path(out + ".server.log"), "--threads", "1",
                          "--adaptive-tol", "0.03", "--adaptive-start", "8", "--adaptive-max",
                          "32", "--batch-wait-ms", "2.0", "--batch-rows", "64",
                          name="fmnist")  # fmt: skip
    raw = [post_request(server.url, "/v1/predict", json.dumps(b).encode())
           for b in _request_bodies(Path(bundle))]  # fmt: skip
    try:
        asyncio.run(closed_loop(server.url, raw, 1, 20))
        rec = subprocess.Popen([spy, "record", "--pid", str(server.process.pid), "--format",
                                "raw", "--threads", "--rate", "50", "--duration", str(seconds),
                                "-o", out, "--nonblocking"])  # fmt: skip
        time.sleep(1)
        res = asyncio.run(closed_loop(server.url, raw, clients, requests))
        rec.wait()
    finally:
        server.stop()
    lat = np.asarray(res.latencies) * 1000
    print(f"p50 {np.percentile(lat, 50):.1f} ms, p99 {np.percentile(lat, 99):.1f} ms, "
          f"{res.answered / res.wall:.1f} requests/s")  # fmt: skip
    print("\n".join(shares(Path(out))))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), a[5] if len(a) > 5 else "py-spy")
