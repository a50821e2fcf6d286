"""The finished rows of ``bayesify bench uci`` read from one or more results stores, as flat
records (one per row) grouped into table cells.

Rows come from the experiments ``gal-uci`` (MC dropout on Gal's splits), ``uci-gal`` (every other
method on Gal's splits) and ``uci-teye`` (Teye et al.'s protocol). Stores are opened read-only; a
row found in several stores is taken from the first. A cell is (protocol, method, likelihood,
dataset); where one cell holds rows of several configurations (a quick and a paper run, or a
rerun with more epochs), the configuration with the most rows is shown, and of equally many the
one finished last (a complete rerun supersedes the run before it), so runs never mix in one mean.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bayesify.atomic import atomic_open
from bayesify.bench import summary
from bayesify.bench.store import ResultsStore, RowKey, StoreError
from bayesify.bench.uci.jobs import GAL_EXPERIMENT, METHODS_EXPERIMENT, TEYE_EXPERIMENT

PROTOCOL_OF = {GAL_EXPERIMENT: "gal", METHODS_EXPERIMENT: "gal", TEYE_EXPERIMENT: "teye"}
#: metrics every finished row of each experiment holds (the page reads them); a row without
#: them is refused on import and reported when a store is read
REQUIRED_METRICS = {GAL_EXPERIMENT: ("rmse", "ll"), METHODS_EXPERIMENT: ("rmse", "ll"),
                    TEYE_EXPERIMENT: ("rmse", "pll")}  # fmt: skip
#: columns of the CSV, in order (metrics absent from a row are left empty)
CSV_FIELDS = (
    "protocol", "experiment", "method", "likelihood", "dataset", "split", "seed", "config_hash",
    "rmse", "ll", "crps", "cu_ll", "cu_crps", "pll_norm", "crps_norm", "mean_std",
    "epistemic_share", "chosen", "seconds",
)  # fmt: skip

Cell = tuple[str, str, str, str]  # protocol, method, likelihood, dataset


def flat_record(row: dict[str, Any]) -> dict[str, Any]:
    """One stored row as a flat record: identity, likelihood, its job configuration (``config``)
    and its scalar metrics (Teye rows' ``pll`` is their test log-likelihood, named ``ll`` here as
    on Gal's rows)."""
    m = dict(row["metrics"])
    if row["experiment"] == TEYE_EXPERIMENT:
        m.setdefault("ll", m.get("pll"))
        m.setdefault("cu_ll", m.get("cu_pll"))
        likelihood = "homoscedastic"
    else:
        likelihood = row["config"].get("likelihood", "homoscedastic")
    if row["experiment"] == GAL_EXPERIMENT and "dropout" in m:
        m.setdefault("chosen", m["dropout"])
    return {
        "protocol": PROTOCOL_OF[row["experiment"]],
        "experiment": row["experiment"],
        "method": row["method"],
        "likelihood": likelihood,
        "dataset": row["dataset"],
        "split": row["split"],
        "seed": row["seed"],
        "config_hash": row["config_hash"],
        "seconds": row.get("seconds"),
        "created": row.get("created"),
        "config": row["config"],
        **m,
    }


def load_records(stores: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Every finished row of the UCI experiments in ``stores`` (missing files are skipped)."""
    seen: set[RowKey] = set()
    out = []
    for path in stores:
        if not Path(path).is_file():
            continue
        with ResultsStore(path, readonly=True) as store:
            if "runs" not in {
                r[0] for r in store.conn.execute("SELECT name FROM sqlite_master")
            }:  # an empty file
                continue
            for experiment in PROTOCOL_OF:
                for row in store.records(experiment):
                    key = RowKey.of(row)
                    _check_done(path, key, row["metrics"])
                    if key not in seen:
                        seen.add(key)
                        out.append(flat_record(row))
    return out


def _check_done(path: str | Path, key: RowKey, metrics: dict[str, Any]) -> None:
    """A done row without its experiment's :data:`REQUIRED_METRICS` is a damaged store."""
    lacking = [k for k in REQUIRED_METRICS[key.experiment] if k not in metrics]
    if lacking:
        raise StoreError(f"{path}: row {key} is marked done but its metrics lack "
                         f"{', '.join(lacking)}; the store is damaged")  # fmt: skip


def cells(records: Iterable[dict[str, Any]]) -> dict[Cell, list[dict[str, Any]]]:
    """Records per cell, keeping in each cell only the configuration with the most rows (of
    equally many, the one whose last row was written last)."""
    groups: dict[Cell, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["protocol"], r["method"], r["likelihood"], r["dataset"]), []).append(r)
    out = {}
    for cell, rows in groups.items():
        count = Counter(r["config_hash"] for r in rows)
        last: dict[str, float] = {}
        for r in rows:
            c = r["config_hash"]
            last[c] = max(last.get(c, -math.inf), r.get("created") or -math.inf)
        config = max(count, key=lambda c: (count[c], last[c]))
        out[cell] = sorted((r for r in rows if r["config_hash"] == config),
                           key=lambda r: (r["split"], r["seed"]))  # fmt: skip
    return out


def mean_se(values: Iterable[float | None]) -> tuple[float, float]:
    """:func:`bayesify.bench.summary.mean_se` as the UCI pages use it: Nones left out (a row
    without the metric), NaN for fewer than two values."""
    return summary.mean_se(values, drop="none")


def pm(mean: float, se: float, digits: int = 2) -> str:
    """``mean ± se`` (``–`` for no mean, the mean alone for no standard error)."""
    if math.isnan(mean):
        return "–"
    return f"{mean:.{digits}f}" if math.isnan(se) else f"{mean:.{digits}f} ± {se:.{digits}f}"


def write_csv(path: str | Path, records: Sequence[dict[str, Any]]) -> Path:
    """Every record as one CSV line (:data:`CSV_FIELDS`)."""
    path = Path(path)
    ordered = sorted(records, key=lambda r: tuple(str(r[k]) for k in CSV_FIELDS[:6]))
    with atomic_open(path, "w", newline="") as f:
        w = csv.DictWriter(f, CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in ordered:
            w.writerow({k: r.get(k) for k in CSV_FIELDS})
    return path
