"""Rows of ``bayesify bench uci`` recovered from its flat CSV (``benchmarks/uci/rows.csv``) when
the store they came from is lost, for :mod:`bayesify.bench.store_io`'s import.

A CSV line holds a row's key (with its configuration hash) and its scalar metrics, but not its
configuration or its uncertainty–error bins. The configuration is recovered by rebuilding the
job of each preset for the line's method, dataset, split, likelihood and seed and keeping the one
whose hash is the line's; a line no preset's job matches is not recovered. The metrics are the
line's non-empty numbers under the names the store uses, marked ``recovered_from``: the tables
of the page come out as before, the uncertainty–error curves lack these rows until a run
recomputes them (a recomputed row replaces the recovered one on import when its numbers agree).
"""

from __future__ import annotations

import csv
import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bayesify.bench.runner import job_config, job_key
from bayesify.bench.store_io import RECOVERED, ImportSummary, import_rows, read_rows
from bayesify.bench.uci.gal import PRESETS
from bayesify.bench.uci.jobs import (
    GAL_EXPERIMENT,
    METHODS_EXPERIMENT,
    TEYE_EXPERIMENT,
    TeyeUCIJob,
    mc_dropout_job,
    method_job,
)
from bayesify.bench.uci.rows import REQUIRED_METRICS

log = logging.getLogger(__name__)

#: CSV column -> metric name in the store, per experiment (the CSV renames a few)
NAMES = {
    GAL_EXPERIMENT: {"chosen": "dropout"},
    METHODS_EXPERIMENT: {},
    TEYE_EXPERIMENT: {"ll": "pll", "cu_ll": "cu_pll"},
}
METRIC_COLUMNS = ("rmse", "ll", "crps", "cu_ll", "cu_crps", "pll_norm", "crps_norm", "mean_std",
                  "chosen")  # fmt: skip


def candidate_jobs(line: dict[str, str]) -> list[Any]:
    """The job of each preset that the CSV line could have come from."""
    exp, m, d, s = line["experiment"], line["method"], line["dataset"], int(line["split"])
    lik, seed = line["likelihood"], int(line["seed"])
    if exp == GAL_EXPERIMENT:
        jobs: list[Any] = [mc_dropout_job(d, s, lik, p) for p in PRESETS]
    elif exp == METHODS_EXPERIMENT:
        jobs = [method_job(m, d, s, lik, p) for p in PRESETS]
    elif exp == TEYE_EXPERIMENT:
        jobs = [TeyeUCIJob(m, d, s, preset=p) for p in PRESETS]
    else:
        return []
    return [dataclasses.replace(j, seed=seed) for j in jobs]


def recover_line(line: dict[str, str], source: str) -> dict[str, Any] | None:
    """The importable row of one CSV line, or None when no preset's job has its hash."""
    exp = line["experiment"]
    job = next((j for j in candidate_jobs(line)
                if job_key(exp, j).config_hash == line["config_hash"]), None)  # fmt: skip
    if job is None:
        return None
    metrics: dict[str, Any] = {NAMES[exp].get(c, c): float(line[c])
                               for c in METRIC_COLUMNS if line.get(c)}  # fmt: skip
    metrics[RECOVERED] = source
    return {
        "experiment": exp, "method": line["method"], "dataset": line["dataset"],
        "split": int(line["split"]), "seed": int(line["seed"]),
        "config_hash": line["config_hash"], "config": job_config(job), "metrics": metrics,
        "seconds": float(line["seconds"]) if line.get("seconds") else None, "created": None,
    }  # fmt: skip


def recover_csv(path: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The recovered rows of a ``rows.csv`` and a description of each line not recovered."""
    path = Path(path)
    rows, lost = [], []
    with path.open(newline="") as f:
        for n, line in enumerate(csv.DictReader(f), 2):
            row = recover_line(line, path.name)
            if row is None:
                lost.append(f"{path.name}:{n} {line['experiment']}/{line['method']}/"
                            f"{line['dataset']}/{line['split']}: no preset's job has config "
                            f"hash {line['config_hash']}")  # fmt: skip
            else:
                rows.append(row)
    return rows, lost


def seed_store(
    store: str | Path, paths: Sequence[str | Path], rerun: bool = False
) -> ImportSummary:
    """Import into ``store`` the finished rows of exports (``.jsonl`` or ``.jsonl.gz``), other
    stores, or a page's ``rows.csv`` (recovered rows), in order; lines that cannot be recovered
    are logged. ``rerun``: the rows replace the stored rows of their jobs (a rerun)."""
    total = ImportSummary()
    for path in paths:
        if Path(path).suffix == ".csv":
            rows, lost = recover_csv(path)
            for text in lost:
                log.warning("not recovered: %s", text)
        else:
            rows = read_rows(path)
        summary = import_rows(store, rows, source=Path(path).name, required=REQUIRED_METRICS,
                              rerun=rerun)  # fmt: skip
        for key in summary.conflicts:
            log.warning("kept the recovered row %s: the full row's numbers differ", key)
        log.info("imported %s into %s: %s", path, store, summary)
        total.add(summary)
    return total
