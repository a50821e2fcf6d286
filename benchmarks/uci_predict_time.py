"""Predict time per 1,000 rows of every method on the UCI page, beside the deterministic network
timed in the same job: the timing the page's older rows (scored before timings were stored)
lack, for all fourteen methods in one run so their ratios compare.

Each job builds the method exactly as ``bayesify bench uci --protocol gal`` (quick preset) does
for its row (:func:`bayesify.bench.uci.jobs.method_job`, Gal's one-hidden-layer MLP of 50 units,
100 for protein; the grid's first value where it has one), fits it for ``--epochs`` epochs on the
split's training part (predict time does not depend on how long the weights trained: the same
layers, members, bank, curvature or random features are evaluated), then times its ``predict``
with the row's T (100; Packed-Ensembles and BatchEnsemble their 4 members) on the test rows
repeated to 1,000 against the deterministic network's one-sample ``predict``: 5 interleaved
rounds after a warm-up each, medians (:func:`bayesify.bench.uci.predict_time.predict_times`,
the code the newer rows were timed by).

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/uci_predict_time.py --splits 3 --epochs 2

(Two epochs at least: SWAG collects for as many epochs as it trained and needs two snapshots.)

Finished jobs are kept in ``--rows`` (JSON lines) and skipped by a rerun; the page is written from
that file.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from bayesify.bench.machine import machine_description
from bayesify.bench.store_io import read_rows, write_lines
from bayesify.bench.summary import mean_se
from bayesify.bench.uci.gal import _train as train_mc_dropout
from bayesify.bench.uci.gal_methods import GRID_NAMES
from bayesify.bench.uci.gal_methods import _grid_trial as grid_trial
from bayesify.bench.uci.jobs import (
    GAL_METHODS,
    GRIDS,
    mc_dropout_job,
    method_job,
    method_likelihoods,
)
from bayesify.bench.uci.predict_time import predict_times
from bayesify.data import load_uci
from bayesify.data.uci import UCI_DATASETS


def _fit(job: Any, data: Any) -> Any:
    """The row's method, built and fitted by the UCI bench's own code for one grid value (the
    grid's first; MC dropout: its first rate), for the job's epochs."""
    if job.method == "mc-dropout":
        return train_mc_dropout(job, data, job.dropout_rates[0])
    name = GRID_NAMES[job.method]
    params = {} if name is None else {name: GRIDS[job.method][0][0]}
    return grid_trial(job, data, params, None)[1]


def time_row(method_name: str, dataset: str, split: int, likelihood: str,
             epochs: int) -> dict[str, Any]:  # fmt: skip
    """One job: fit, then time ``predict`` beside the deterministic network."""
    if method_name == "mc-dropout":
        job = mc_dropout_job(dataset, split, likelihood, "quick", epochs=epochs)
    else:
        job = method_job(method_name, dataset, split, likelihood, "quick", epochs=epochs)
    data = load_uci(dataset, split, protocol="gal", val_fraction=job.val_fraction)
    t0 = time.perf_counter()
    with warnings.catch_warnings():  # a one-epoch fit's warnings say nothing about its speed
        warnings.simplefilter("ignore")
        method = _fit(job, data)
        fit_s = time.perf_counter() - t0
        times = predict_times(method, job, data.x_test)
    return {"method": method_name, "dataset": dataset, "split": split, "likelihood": likelihood,
            "epochs": epochs, "fit_s": fit_s, **times}  # fmt: skip


def _key(r: dict[str, Any]) -> tuple:
    return r["method"], r["dataset"], r["split"], r["likelihood"]


def write_page(rows: list[dict[str, Any]], args: argparse.Namespace, wall: float) -> str:
    """The page: per (dataset, method, likelihood), ms per 1,000 rows of the method and of the
    deterministic network and their per-job ratio, mean ± standard error over splits."""
    cells: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["dataset"], r["method"], r["likelihood"]), []).append(r)
    order = {m: i for i, m in enumerate(GAL_METHODS)}
    lines = [
        "# Predict time of every UCI method beside the deterministic network",
        "",
        __doc__.split("\n\n")[0].replace("\n", " ").strip(),
        "",
        "Command: `PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/uci_predict_time.py "
        f"--splits {args.splits} --epochs {args.epochs}`"
        + (f" `--datasets {args.datasets}`" if args.datasets else ""),
        "",
        f"Machine: {machine_description()}. This call: {wall:.0f} s wall.",
        "",
        "Each method is fitted as `bayesify bench uci --protocol gal` (quick preset) builds its "
        f"row, for {args.epochs} epoch(s) only (predict time does not depend on the training "
        "length), on splits 0 to "
        f"{args.splits - 1} of each dataset; then its `predict` with the row's T on the test "
        "rows repeated to 1,000, and the deterministic network of the same shape (Gal's MLP, "
        "batch norm for MCBN; one sample through the same `predict`), each the median of 5 "
        "interleaved calls after a warm-up. Ratio: the method's time over the deterministic "
        "network's in the same job. Mean ± standard error over the splits; one torch thread; "
        "a shared 2-core machine, so absolute milliseconds move with its load and the ratios "
        "are the figures to read.",
        "",
        "| dataset | method | likelihood | splits | T | predict ms / 1,000 rows | "
        "deterministic ms / 1,000 rows | ratio |",
        "| --- | --- | --- | ---: | --- | ---: | ---: | ---: |",
    ]
    by_method: dict[str, list[float]] = {}
    for (d, m, lik), rs in sorted(cells.items(), key=lambda kv: (
            UCI_DATASETS.index(kv[0][0]), order[kv[0][1]], kv[0][2])):  # fmt: skip
        ours = [r["predict_ms_per_1000"] for r in rs]
        det = [r["det_predict_ms_per_1000"] for r in rs]
        ratio = [a / b for a, b in zip(ours, det, strict=True)]
        by_method.setdefault(f"{m} ({lik})", []).extend(ratio)
        t = ", ".join(str(s) for s in sorted({r["predict_samples"] for r in rs}))
        lines.append(f"| {d} | {m} | {lik} | {len(rs)} | {t} | {_pm(ours, 2)} | "
                     f"{_pm(det, 2)} | {_pm(ratio, 1)} |")  # fmt: skip
    lines += [
        "",
        "Per method, the ratio over every job of every dataset (median, and the range):",
        "",
        "| method (likelihood) | jobs | median ratio | range |",
        "| --- | ---: | ---: | --- |",
    ]
    for name, ratios in sorted(by_method.items(), key=lambda kv: sorted(kv[1])[len(kv[1]) // 2]):
        s = sorted(ratios)
        lines.append(f"| {name} | {len(s)} | {s[len(s) // 2]:.1f} | {s[0]:.1f}–{s[-1]:.1f} |")
    return "\n".join(lines) + "\n"


def _pm(values: list[float], digits: int) -> str:
    m, se = mean_se(values)
    return f"{m:.{digits}f}" if len(values) < 2 else f"{m:.{digits}f} ± {se:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--splits", type=int, default=3, help="splits 0..N-1 of each dataset")
    parser.add_argument("--epochs", type=int, default=2, help="training epochs before timing")
    parser.add_argument("--datasets", default="", help="comma-separated (default: all nine)")
    parser.add_argument("--methods", default="", help="comma-separated (default: all)")
    parser.add_argument(
        "--rows",
        default="benchmarks/uci/predict_time.jsonl.gz",
        help="finished rows, JSON Lines (gzip-compressed if it ends .gz)",
    )
    parser.add_argument("--page", default="benchmarks/uci_predict_time.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    datasets = args.datasets.split(",") if args.datasets else list(UCI_DATASETS)
    methods = args.methods.split(",") if args.methods else list(GAL_METHODS)
    path = Path(args.rows)
    rows = read_rows(path) if path.exists() else []
    done = {_key(r) for r in rows}
    t0 = time.perf_counter()
    for d in datasets:
        for split in range(args.splits):
            for m in methods:
                for lik in method_likelihoods(m, None):
                    if (m, d, split, lik) in done:
                        continue
                    r = time_row(m, d, split, lik, args.epochs)
                    print(f"{d} {split} {m} {lik}: {r['predict_ms_per_1000']:.1f} ms against "
                          f"{r['det_predict_ms_per_1000']:.1f} (fit {r['fit_s']:.1f} s)",
                          flush=True)  # fmt: skip
                    rows.append(r)
                    # every row so far, renamed into place: a kill leaves the last whole file
                    write_lines(path, "".join(json.dumps(r) + "\n" for r in rows))
    Path(args.page).write_text(write_page(rows, args, time.perf_counter() - t0))


if __name__ == "__main__":
    main()
