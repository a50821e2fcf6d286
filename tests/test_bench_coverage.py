"""`bench coverage` end to end on a little real data (the report's structure, not its figures)."""

from __future__ import annotations

import re

import pytest

from bayesify.bench.toys.coverage import CoverageOptions, run
from bayesify.data import DataError, data_root


def test_small_run_reports_every_row(tmp_path):
    try:
        data_root()
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")
    out = tmp_path / "coverage.md"
    opts = CoverageOptions(datasets=("bostonHousing",), splits=1, epochs=2, samples=4,
                           fmnist_train=200, fmnist_pool=100, fmnist_epochs=1, fmnist_samples=2,
                           repeats=3, out=str(out))  # fmt: skip
    text = run(opts)
    assert out.read_text() == text
    assert "`bayesify bench coverage --datasets bostonHousing --splits 1" in text
    uci = [line for line in text.splitlines() if line.startswith("| bostonHousing |")]
    assert [line.split("|")[2].strip() for line in uci] == ["mcbn", "mc-dropout"]
    test_rows = int(uci[0].split("|")[3])
    assert test_rows == 51  # Gal's split 0 of Boston holds out 51 rows
    for cell in re.findall(r"\| (\d+\.\d) ± \d+\.\d \|", "\n".join(uci)):
        assert 0 <= float(cell) <= 100
    table = text.split("prediction sets")[-1].splitlines()
    sets = [line.split("|")[1].strip() for line in table if line.startswith("| ")]
    sets = [name for name in sets if name not in ("set", "---")]
    assert sets[1:] == ["APS", "APS, randomized", "RAPS (k_reg 1, λ 0.05)"]


def test_options_are_checked():
    with pytest.raises(ValueError, match="calibration must be strictly between 0 and 1"):
        CoverageOptions(calibration=1.0)
    with pytest.raises(ValueError, match="unknown datasets"):
        CoverageOptions(datasets=("mnist",))
