"""`bench mcbn-collapse` end to end on a few real images (structure, not figures)."""

from __future__ import annotations

import pytest

from bayesify.bench.toys.mcbn_collapse import MCBNCollapseOptions, retrain_lr, run
from bayesify.data import DataError, data_root


def test_retrain_lr_is_square_root_scaling():
    assert retrain_lr(32) == pytest.approx(1e-3)
    assert retrain_lr(128) == pytest.approx(2e-3)
    assert retrain_lr(8, base=0.01, base_batch=2) == pytest.approx(0.02)


def test_small_run_reports_both_protocols(tmp_path):
    try:
        data_root()
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")
    opts = MCBNCollapseOptions(out=str(tmp_path), n_train=64, n_val=16, n_test=24, epochs=1,
                               samples=2, bundle="")  # fmt: skip
    text = run(opts)
    assert (tmp_path / "README.md").read_text() == text
    assert (tmp_path / "mcbn_collapse.png").stat().st_size > 10_000
    retrained = text.split("**Retrained at each b**")[1]
    rows = [line.split("|")[1].strip() for line in retrained.splitlines() if line.startswith("| ")]
    assert rows[2:] == ["16", "32", "64"]  # header, rule, then every b up to 64 training rows
    assert "| 16 | 0.00071 |" in retrained  # lr 1e-3·√(16/32)
    without = run(MCBNCollapseOptions(**{**opts.__dict__, "retrain": False}))
    assert "Retrained" not in without


def test_options_are_checked():
    with pytest.raises(ValueError, match="--n-train must be >= 1"):
        MCBNCollapseOptions(n_train=0)
