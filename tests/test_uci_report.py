"""The published numbers the UCI benchmark compares against, read back from the paper's text."""

from __future__ import annotations

import re
import types

import pytest
import torch

from bayesify import Predictive
from bayesify.bench.store import ResultsStore
from bayesify.bench.uci import teye_report as uci_report
from bayesify.bench.uci.teye import UCISettings
from bayesify.bench.uci.teye_report import TEYE_TABLE_1
from bayesify.data import data_root
from bayesify.data.errors import DataError

# Table 1's row names -> our dataset names
ROWS = {
    "Boston": "bostonHousing",
    "Concrete": "concrete",
    "Energy": "energy",
    "Kin8nm": "kin8nm",
    "Power": "power-plant",
    "Protein": "protein-tertiary-structure",
    "Wine (Red)": "wine-quality-red",
    "Yacht": "yacht",
}


def _teye_text() -> str:
    try:
        papers = data_root().parent / "papers"
    except DataError:
        pytest.skip("no data folder, so no papers folder beside it")
    for path in sorted(papers.glob("*.txt")) if papers.is_dir() else []:
        text = path.read_text(errors="replace")
        if "Uncertainty quality measured on eight regression datasets" in text:
            return text
    pytest.skip(f"Teye et al.'s text is not in {papers}")


def test_teye_table_1_matches_the_paper():
    """Each row reads: name, then CRPS for MCBN, MCDO, MNF and PLL for the same three, each
    number followed by its significance stars; we keep MCBN's and MCDO's CRPS and PLL."""
    text = _teye_text()
    table = text[text.index("Uncertainty quality measured on eight regression datasets") :]
    number = r"(-?\d+\.\d+)\s*(\*+|ns)"
    found, found_do, stars = {}, {}, {"MCBN": {}, "MCDO": {}}
    for row, name in ROWS.items():
        m = re.search(rf"^{re.escape(row)}\s+" + r"\s+".join([number] * 6), table, re.M)
        assert m, row
        g = m.groups()  # (value, stars) × CRPS MCBN, MCDO, MNF, PLL MCBN, MCDO, MNF
        found[name] = (float(g[0]), float(g[6]))
        found_do[name] = (float(g[2]), float(g[8]))
        stars["MCBN"][name] = (g[1], g[7])
        stars["MCDO"][name] = (g[3], g[9])
    assert found == TEYE_TABLE_1
    assert found_do == uci_report.TEYE_TABLE_1_MCDO
    assert stars == uci_report.TEYE_STARS


def test_report_holds_only_this_runs_cells(tmp_path, monkeypatch):
    """A second run into the same folder (fewer splits, other scores) reports its own cells,
    though results.db keeps the first run's other splits."""
    level = {"rmse": 0.0}

    def fake_split(name, split, settings, seed=0):
        scores = {
            m: {k: level["rmse"] + split for k in uci_report.METRICS} for m in ("MCBN", "CUBN")
        }
        pred = Predictive.regression(torch.randn(4, 6, generator=torch.Generator().manual_seed(0)),
                                     torch.full((6,), 0.1))  # fmt: skip
        split_data = types.SimpleNamespace(y_test_original=torch.zeros(6))
        return types.SimpleNamespace(scores=scores, pred=pred, split=split_data)

    monkeypatch.setattr(uci_report, "run_mcbn_split", fake_split)
    settings = UCISettings()
    uci_report.run_uci_benchmark(["concrete"], 3, settings, tmp_path, progress=False)
    level["rmse"] = 100.0
    text, rows = uci_report.run_uci_benchmark(["concrete"], 1, settings, tmp_path, progress=False)
    assert [(r["split"], r["rmse"]) for r in rows] == [(0, 100.0), (0, 100.0)]
    assert "| concrete | MCBN | 1 | 100.000 ± " in text
    stored = ResultsStore(tmp_path / "results.db").rows(uci_report.EXPERIMENT)
    assert sorted((r["split"], r["rmse"]) for r in stored if r["method"] == "MCBN") == [
        (0, 100.0), (1, 1.0), (2, 2.0)
    ]  # fmt: skip
