"""``bayesify predict`` never loses a file: no output or skipped-rows list may be the input or an
existing file without ``--overwrite``, a run that predicts no row fails in one line and leaves an
earlier output as it was (never an old file reported as new), and temporaries of killed runs
are removed by the next write of the same target."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest
from torch import nn
from typer.testing import CliRunner

import bayesify
from bayesify.atomic import Replacement, remove_stale_temporaries, temporary_beside
from bayesify.cli import app
from bayesify.data.preprocessing import Preprocessing

runner = CliRunner()


def _bundle(tmp_path):
    m = bayesify.Deterministic(nn.Sequential(nn.Linear(2, 1)))
    m.noise_variance = 1.0
    m.preprocessing = Preprocessing(features=["a", "b"])
    return m.save(tmp_path / "bundle")


def _rows(path, n, bad=()):
    rng = np.random.default_rng(n)
    frame = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n).astype(object)})
    for r in bad:
        frame.loc[r, "b"] = "oops"
    frame.to_csv(path, index=False)
    return path


def _predict(bundle, rows, out, *extra):
    args = ["predict", bundle, rows, "--out", out, "--samples", 2, "--chunk-rows", 7,
            "--no-progress", *extra]  # fmt: skip
    result = runner.invoke(app, [str(a) for a in args])
    return result, " ".join(result.output.replace("│", " ").split())


def _one_line_error(result) -> None:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.output.strip().startswith("error:")
    assert "Traceback" not in result.output


@pytest.mark.parametrize("on_error", ["skip", "fail"])
def test_the_skipped_list_never_replaces_the_input(tmp_path, on_error):
    bundle = _bundle(tmp_path)
    rows = _rows(tmp_path / "p.skipped.csv", 20, bad=[3] if on_error == "skip" else [])
    before = rows.read_bytes()
    result, said = _predict(bundle, rows, tmp_path / "p.csv", "--on-error", on_error)
    assert rows.read_bytes() == before  # the old code wrote (skip) or removed (fail) it
    if on_error == "skip":
        _one_line_error(result)
        assert f"{rows}, an input" in said and not (tmp_path / "p.csv").exists()
    else:
        assert result.exit_code == 0, said


def test_an_existing_skipped_list_needs_overwrite(tmp_path):
    bundle = _bundle(tmp_path)
    side = tmp_path / "p.skipped.csv"
    side.write_text("mine\n")
    result, said = _predict(bundle, _rows(tmp_path / "in.csv", 20, bad=[2]), tmp_path / "p.csv",
                            "--on-error", "skip")  # fmt: skip
    _one_line_error(result)
    assert f"{side} exists" in said and "--overwrite" in said
    assert side.read_text() == "mine\n" and not (tmp_path / "p.csv").exists()
    result, said = _predict(bundle, tmp_path / "in.csv", tmp_path / "p.csv", "--on-error",
                            "skip", "--overwrite")  # fmt: skip
    assert result.exit_code == 0, said
    assert list(pd.read_csv(side)["row"]) == [2] and len(pd.read_csv(tmp_path / "p.csv")) == 19


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".npz"])
def test_a_run_that_predicts_no_row_fails_and_keeps_the_old_output(tmp_path, suffix):
    bundle, out = _bundle(tmp_path), tmp_path / f"old{suffix}"
    result, said = _predict(bundle, _rows(tmp_path / "good.csv", 10), out)
    assert result.exit_code == 0, said
    before = out.read_bytes()
    every_bad = _rows(tmp_path / "bad.csv", 10, bad=range(10))
    result, said = _predict(bundle, every_bad, out, "--overwrite", "--on-error", "skip")
    _one_line_error(result)
    assert "predicted 0 row" not in said
    assert f"no row of {every_bad} could be predicted: all 10 were skipped" in said
    assert f"{out} was left as it was" in said
    assert out.read_bytes() == before
    assert list(pd.read_csv(tmp_path / "old.skipped.csv")["row"]) == list(range(10))
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_an_input_without_rows_is_an_error_not_an_empty_output(tmp_path):
    bundle, out = _bundle(tmp_path), tmp_path / "p.parquet"
    (tmp_path / "empty.csv").write_text("a,b\n")
    result, said = _predict(bundle, tmp_path / "empty.csv", out)
    _one_line_error(result)
    assert "has no rows to predict" in said and "was not written" in said and not out.exists()


def test_help_names_the_skipped_list_the_run_writes(tmp_path):
    result = runner.invoke(app, ["predict", "--help"], env={"COLUMNS": "200"})
    helped = " ".join(result.output.replace("│", " ").split())
    assert "<OUT stem>.skipped.csv beside OUT, e.g. pred.csv -> pred.skipped.csv" in helped
    bundle = _bundle(tmp_path)
    result, said = _predict(bundle, _rows(tmp_path / "in.csv", 9, bad=[4]),
                            tmp_path / "pred.csv", "--on-error", "skip")  # fmt: skip
    assert result.exit_code == 0, said
    # rich wraps a long path inside a word (a pytest-xdist worker's tmp path is longer)
    assert f"listedin{tmp_path / 'pred.skipped.csv'}" in said.replace(" ", "")
    assert (tmp_path / "pred.skipped.csv").is_file()


def _age(path, seconds: float) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old))


_KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys
    from bayesify.atomic import Replacement
    new = Replacement(sys.argv[1])
    with open(new.path, "w") as f:
        f.write("half a file")
    print(new.path, flush=True)
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.stdin.read()  # a live writer: holds its temporary until told to stop
""")


def _writer(target, mode: str):
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(target), mode],
                            stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)  # fmt: skip
    path = proc.stdout.readline().strip()
    return proc, path


@pytest.mark.skipif(sys.platform == "win32", reason="flock")
def test_a_killed_runs_temporary_goes_with_the_next_run_and_nothing_else_does(tmp_path):
    bundle, out = _bundle(tmp_path), tmp_path / "pred.csv"
    killed, dead = _writer(out, "kill")
    killed.wait(timeout=60)
    assert killed.returncode == -signal.SIGKILL and os.path.exists(dead)
    live, alive = _writer(out, "live")
    try:
        young = temporary_beside(out)  # a writer that has only just begun
        others = [tmp_path / ".pred.tmp-notours.csv", tmp_path / ".pred.tmp-0123456789ab.txt",
                  tmp_path / ".other.tmp-0123456789ab.csv"]  # fmt: skip
        for p in others:
            p.write_text("x")
        for p in (dead, alive, *others):
            _age(p, 3600)
        result, said = _predict(bundle, _rows(tmp_path / "in.csv", 10), out)
        assert result.exit_code == 0, said
        assert not os.path.exists(dead)
        assert os.path.exists(alive) and young.exists() and all(p.exists() for p in others)
    finally:
        live.communicate("", timeout=60)
    assert os.path.exists(alive)  # its writer ended without renaming it: stale from now on
    young.unlink()
    assert remove_stale_temporaries(out, stale_seconds=0) == [tmp_path / os.path.basename(alive)]


def test_a_writer_holds_its_temporary_until_it_is_renamed(tmp_path):
    target = tmp_path / "t.csv"
    new = Replacement(target)
    _age(new.path, 3600)
    assert remove_stale_temporaries(target, stale_seconds=0) == []
    new.path.write_text("done")
    new.commit()
    assert target.read_text() == "done" and remove_stale_temporaries(target, 0) == []
