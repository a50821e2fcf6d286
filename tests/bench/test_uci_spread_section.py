"""The UCI page's table of cells whose spread bayesify's own rule calls negligible."""

from __future__ import annotations

import pytest

from bayesify.bench.uci.spread_section import flagged, negligible_spread_section

HOMO, HETERO = "homoscedastic", "heteroscedastic"


def _rows(shares, pll=None):
    return [{"split": i, "epistemic_share": s, "pll_norm": pll} for i, s in enumerate(shares)]


@pytest.mark.parametrize(
    ("shares", "expected"),
    [
        ([0.009, 0.008, 0.012], (pytest.approx(0.029 / 3), 2, 3)),  # mean below 1%
        ([0.005, 0.005, 0.03, 0.03], (pytest.approx(0.0175), 2, 4)),  # half the splits below
        ([0.005, 0.03, 0.03, 0.03], None),  # one split of four below, mean above
        ([0.01, 0.01], None),  # at the threshold is not below it
        ([None, None], None),  # rows scored before the share existed
    ],
)
def test_a_cell_is_flagged_by_its_mean_or_by_half_its_splits(shares, expected):
    assert flagged(_rows(shares)) == expected


def test_the_table_lists_every_flagged_cell_beside_the_best_pll_of_its_likelihood():
    table = {
        ("gal", "a", HOMO, "yacht"): _rows([0.004, 0.006], pll=0.5),
        ("gal", "b", HOMO, "yacht"): _rows([0.2, 0.3], pll=7.0),
        ("gal", "b", HETERO, "yacht"): _rows([0.2, 0.3], pll=40.0),
        ("gal", "c", HETERO, "yacht"): _rows([0.001, 0.003], pll=30.0),
        ("gal", "a", HOMO, "wine-quality-red"): _rows([0.05, 0.06], pll=1.0),
        ("teye", "a", HOMO, "wine-quality-red"): _rows([0.001, 0.001], pll=1.0),
    }
    variants = [("a", HOMO), ("b", HOMO), ("b", HETERO), ("c", HETERO)]
    lines = negligible_spread_section(table, "gal", variants)
    body = [line for line in lines if line.startswith("| yacht") or line.startswith("| wine")]
    # a's homoscedastic cell is compared with b's homoscedastic 7.0, not b's heteroscedastic 40.0
    assert body == [
        "| yacht | a | homoscedastic | 0.50 ± 0.10% | 0.40–0.60% | 2 of 2 | 0.5 | 7.0 (b) |",
        "| yacht | c | heteroscedastic | 0.20 ± 0.10% | 0.10–0.30% | 2 of 2 | 30.0 | 40.0 (b) |",
    ]
    assert lines[-1] == "Datasets flagged per method: a: 1 (yacht); c: 1 (yacht)."


def test_no_flagged_cell_gives_no_section():
    table = {("gal", "a", HOMO, "yacht"): _rows([0.2, 0.3], pll=1.0)}
    assert negligible_spread_section(table, "gal", [("a", HOMO)]) == []
