"""``bayesify bench serve`` end to end on a small Fashion-MNIST bundle it trains itself: every
configuration served by a real process without an error, the table complete, the offline
sections written (skipped without the shared data)."""

from __future__ import annotations

import re

import pytest

from bayesify.bench.experiments import serve as bench_serve
from bayesify.data import data_root
from bayesify.data.errors import DataError


def test_bench_serve_writes_every_configuration(tmp_path):
    try:
        data_root()
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")
    opts = bench_serve.ServeBenchOptions(limit=300, epochs=1, clients=(1, 2), requests=8,
                                         samples=8, start=4, max_samples=8, tol=0.05,
                                         test_rows=40, threads=1,
                                         out=str(tmp_path / "serve.md"))  # fmt: skip
    text = bench_serve.run(opts)
    assert (tmp_path / "serve.md").read_text() == text
    load = text.split("## Closed-loop load")[1].split("## Adaptive sampling")[0]
    rows = [line for line in load.splitlines() if re.match(r"\| (fixed|adaptive|int8)", line)]
    assert len(rows) == 5 * 2
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        label, clients, p50, p95, p99, rps, samples, errors, server_cpu, client_cpu = cells
        assert clients in ("1", "2") and errors == "0", row
        assert 0 < float(p50) <= float(p95) <= float(p99)
        assert float(rps) > 0 and float(server_cpu) > 0 and float(client_cpu) > 0
        if label.startswith("adaptive"):
            assert 4 <= float(samples) <= 8
        else:
            assert float(samples) == 8
    for section in ("## Adaptive sampling against fixed T", "## int8 against float32"):
        assert section in text
