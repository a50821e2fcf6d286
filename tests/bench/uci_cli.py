"""`bayesify bench uci` run through the real command line on one yacht split, for tests that
check what a run stores and writes (skipped where the shared UCI data is missing)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from bayesify.cli import app
from bayesify.data import DataError, data_root


def run_bench_uci(folder: Path, methods: str, likelihoods: str, *extra: str) -> list[str]:
    """Run ``bench uci`` (yacht, split 0, 2 epochs, one worker) with ``methods`` and
    ``likelihoods`` into ``folder/a.db`` and ``folder/uci.md``; returns its arguments."""
    try:
        (data_root() / "uci" / "yacht").resolve(strict=True)
    except (DataError, FileNotFoundError) as e:
        pytest.skip(f"shared UCI data not found: {e}")
    args = ["bench", "uci", "--datasets", "yacht", "--splits", "1", "--epochs", "2",
            "--methods", methods, "--likelihoods", likelihoods, "--workers", "1",
            "--store", str(folder / "a.db"), "--out", str(folder / "uci.md"), *extra]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return args
