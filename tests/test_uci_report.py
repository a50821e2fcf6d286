"""The published numbers the UCI benchmark compares against, read back from the paper's text."""

from __future__ import annotations

import re

import pytest

from bayesify.bench.uci_report import TEYE_TABLE_1
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
    number followed by its significance stars; we keep MCBN's CRPS and PLL."""
    text = _teye_text()
    table = text[text.index("Uncertainty quality measured on eight regression datasets") :]
    number = r"(-?\d+\.\d+)\s*(?:\*+|ns)"
    found = {}
    for row, name in ROWS.items():
        m = re.search(rf"^{re.escape(row)}\s+" + r"\s+".join([number] * 6), table, re.M)
        assert m, row
        found[name] = (float(m.group(1)), float(m.group(4)))
    assert found == TEYE_TABLE_1
