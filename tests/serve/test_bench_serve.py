"""``bayesify bench serve`` end to end on a small Fashion-MNIST bundle, trained once for the
module by the command's own training step (``bayesify train`` in a new process): every
configuration served by a real process without an error, the table complete, the offline
sections written (skipped without the shared data)."""

from __future__ import annotations

import re

import pytest

from bayesify.bench.serve import command as bench_serve
from bayesify.data import data_root
from bayesify.data.errors import DataError


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> str:
    """What ``bayesify bench serve`` trains when no --bundle is given: 300 images, 1 epoch."""
    try:
        data_root()
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")
    opts = bench_serve.ServeBenchOptions(limit=300, epochs=1)
    path = bench_serve._bundle(opts, tmp_path_factory.mktemp("bench-serve"))
    assert (path / "config.json").is_file()
    return str(path)


def test_bench_serve_writes_every_configuration(tmp_path, bundle):
    opts = bench_serve.ServeBenchOptions(bundle=bundle, clients=(1, 2), requests=8,
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


def test_bench_serve_two_workers(tmp_path, bundle):
    """``--workers 2``, one configuration: the requests each worker answered add up to the
    run's and the metrics request read before it."""
    opts = bench_serve.ServeBenchOptions(bundle=bundle, clients=(4,), requests=12,
                                         samples=8, workers=(2,), sampling=("fixed",),
                                         batching=("on",), int8=False, offline=False,
                                         threads=1, out=str(tmp_path / "serve.md"))  # fmt: skip
    text = bench_serve.run(opts)
    assert "## Adaptive sampling" not in text
    (row,) = [line for line in text.splitlines() if line.startswith("| fixed T = 8")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    label, clients, p50, p95, p99, rps, samples, errors, _, _, per_worker = cells
    assert label == "fixed T = 8, batching on, 2 workers" and clients == "4" and errors == "0"
    assert 0 < float(p50) <= float(p95) <= float(p99) and float(rps) > 0
    assert sum(int(n) for n in per_worker.split("/")) == 12 + 1


def test_rows_of_several_rounds_show_medians_and_each_round():
    def run(p99: float, rate: float, errors: int = 0) -> bench_serve._Run:
        return bench_serve._Run(p50=1.0, p95=2.0, p99=p99, rate=rate, mean_used=8.0,
                                errors=errors, server_cpu=None, client_cpu=0.25,
                                per_worker="5/7")  # fmt: skip

    cells = bench_serve._cells([run(30.0, 300.0), run(50.0, 200.0, 1), run(40.0, 250.0)], True)
    assert cells == ["1.0", "2.0", "40.0", "250.0", "8.0", "1", "–", "0.25",
                     "300.0 / 200.0 / 250.0", "5/7"]  # fmt: skip
    assert bench_serve._cells([run(30.0, 300.0)], False) == [
        "1.0", "2.0", "30.0", "300.0", "8.0", "0", "–", "0.25"]  # fmt: skip
