"""``bayesify predict`` writes its output whole or not at all: a run that fails leaves an earlier
output byte for byte as it was and no temporary file, and nothing that blocks the rerun."""

from __future__ import annotations

import os
import stat

import numpy as np
import pandas as pd
import pytest
from torch import nn
from typer.testing import CliRunner

import bayesify
from bayesify.atomic import write_text
from bayesify.cli import app
from bayesify.data.preprocessing import Preprocessing
from bayesify.data.tables import TableWriter

runner = CliRunner()


def _bundle(tmp_path):
    m = bayesify.Deterministic(nn.Sequential(nn.Linear(2, 1)))
    m.noise_variance = 1.0
    m.preprocessing = Preprocessing(features=["a", "b"])
    return m.save(tmp_path / "bundle")


def _rows(path, n, bad=None):
    rng = np.random.default_rng(n)
    frame = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n)})
    if bad is not None:
        frame["b"] = frame["b"].astype(object)
        frame.loc[bad, "b"] = "oops"
    frame.to_csv(path, index=False)
    return path


def _predict(bundle, rows, out, *extra):
    args = ["predict", bundle, rows, "--out", out, "--samples", 2, "--chunk-rows", 20,
            "--no-progress", *extra]  # fmt: skip
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_failed_overwrite_leaves_the_old_output_byte_identical(tmp_path, suffix):
    bundle, out = _bundle(tmp_path), tmp_path / "out" / f"pred{suffix}"
    out.parent.mkdir()
    assert _predict(bundle, _rows(tmp_path / "old.csv", 200), out).exit_code == 0
    before = out.read_bytes()
    # the bad row is in the fourth chunk: three chunks were written before it fails
    result = _predict(bundle, _rows(tmp_path / "new.csv", 100, bad=70), out, "--overwrite")
    assert result.exit_code == 2 and "row 70" in result.output
    assert out.read_bytes() == before
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no temporary file


def test_a_failure_at_row_5_leaves_no_output_and_the_rerun_works(tmp_path):
    bundle, out = _bundle(tmp_path), tmp_path / "pred.csv"
    result = _predict(bundle, _rows(tmp_path / "bad.csv", 50, bad=5), out)
    assert result.exit_code == 2 and "row 5" in result.output
    assert not out.exists() and not list(tmp_path.glob(".pred*"))
    result = _predict(bundle, _rows(tmp_path / "good.csv", 50), out)  # no --overwrite needed
    assert result.exit_code == 0, result.output
    assert len(pd.read_csv(out)) == 50


def test_a_stale_skipped_list_is_removed_with_the_output_it_described(tmp_path):
    bundle, out = _bundle(tmp_path), tmp_path / "pred.csv"
    assert _predict(bundle, _rows(tmp_path / "bad.csv", 50, bad=5), out,
                    "--on-error", "skip").exit_code == 0  # fmt: skip
    assert list(pd.read_csv(tmp_path / "pred.skipped.csv")["row"]) == [5]
    assert _predict(bundle, _rows(tmp_path / "good.csv", 50), out, "--overwrite").exit_code == 0
    assert not (tmp_path / "pred.skipped.csv").exists()


def test_written_files_take_the_mode_of_the_users_umask(tmp_path):
    old = os.umask(0o027)
    try:
        write_text(tmp_path / "page.md", "x")
        with TableWriter(tmp_path / "t.csv") as w:
            w.write(pd.DataFrame({"a": [1]}))
        bundle = _bundle(tmp_path)
        result = _predict(bundle, _rows(tmp_path / "in.csv", 10), tmp_path / "p.parquet")
        assert result.exit_code == 0, result.output
    finally:
        os.umask(old)
    files = [tmp_path / "page.md", tmp_path / "t.csv", tmp_path / "p.parquet",
             bundle / "config.json", bundle / "weights.safetensors"]  # fmt: skip
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o640 for f in files}
