"""A tiny sqlite3 results store: one row per (experiment, dataset, split, method)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    experiment TEXT NOT NULL,
    dataset TEXT NOT NULL,
    split INTEGER NOT NULL,
    method TEXT NOT NULL,
    metrics TEXT NOT NULL,
    settings TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (experiment, dataset, split, method)
)
"""


class ResultsStore:
    """Results of benchmark runs in an sqlite file (re-running a cell replaces it)."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(path))
        self.conn.execute(_SCHEMA)

    def add(
        self,
        experiment: str,
        dataset: str,
        split: int,
        method: str,
        metrics: dict[str, float],
        settings: dict[str, Any] | None = None,
    ) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?)",
            (experiment, dataset, split, method, json.dumps(metrics),
             json.dumps(settings or {}), time.time()),
        )  # fmt: skip
        self.conn.commit()

    def rows(self, experiment: str) -> list[dict[str, Any]]:
        """All rows of ``experiment`` as dicts with the metrics flattened in."""
        cur = self.conn.execute(
            "SELECT dataset, split, method, metrics FROM results WHERE experiment = ? "
            "ORDER BY dataset, method, split",
            (experiment,),
        )
        return [{"dataset": d, "split": s, "method": m, **json.loads(js)} for d, s, m, js in cur]
