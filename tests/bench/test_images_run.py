"""A tiny `bench images` run end to end: every section and figure, resuming, the rows'
contents against independent recomputation, --export/--preamble, and the note on rows made
under other method defaults."""

from __future__ import annotations

import gzip
import json
import sqlite3
from dataclasses import replace

import pytest
import torch

from bayesify.bench.images import command as images
from bayesify.bench.images import jobs as ij
from bayesify.bench.images import predict_time as images_predict_time
from bayesify.bench.images.report import SECTIONS
from bayesify.bench.method_defaults import KEY
from bayesify.data import DataError, data_root


def _tiny_preset() -> ij.Preset:
    return replace(ij.PRESETS["quick"], epochs=1, samples=3, n_calib=60, n_ood=80,
                   n_corrupt=40, gammas=(0.0, 1.0), ps=(0.0, 0.5), bank_batches=(16, 32),
                   members=2, bank_size=8)  # fmt: skip


def test_tiny_run_writes_every_section_and_resumes(tmp_path, monkeypatch):
    try:
        data_root()
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")
    monkeypatch.setitem(ij.PRESETS, "quick", _tiny_preset())
    # the timings are checked for presence and their ratio, not their size: time few rows once
    monkeypatch.setattr(images_predict_time, "ROWS", 20)
    monkeypatch.setattr(images_predict_time, "ROUNDS", 1)
    opts = images.ImagesOptions(store=str(tmp_path / "r.db"), out=str(tmp_path / "images.md"),
                                checkpoints=str(tmp_path / "nets"), n_val=200,
                                n_train=200, n_test=100)  # fmt: skip
    text = images.run(opts)
    assert (tmp_path / "images.md").read_text() == text
    assert "\nMachine: " in text  # this call ran the jobs
    assert "Test set, 15 bins, seed 0; per-bin counts" in text  # the reliability figure's rows
    positions = [text.index(s) for s in SECTIONS]
    assert positions == sorted(positions)
    for name in ("corruption", "coverage", "reliability", "mcbn_sweep"):
        png = tmp_path / "images" / f"{name}_lenet.png"
        assert png.stat().st_size > 5_000
        assert f"(images/{name}_lenet.png)" in text
    assert "| deterministic | 1 − max prob |" in text  # the baseline's default score
    assert "| −max logit | energy | entropy | MI | Mahalanobis |" in text
    assert "4 finished" in text
    # every job trained: deterministic and ensemble member 0 are one cached network
    assert sorted(p.name.split("-s")[0] for p in (tmp_path / "nets").iterdir()) == [
        "lenet-deterministic", "lenet-deterministic", "lenet-mc-dropout"]  # fmt: skip

    # the stored error of the deterministic row is the cached network's test error
    from bayesify.bench.store import ResultsStore
    from bayesify.io import read_bundle
    from bayesify.models import lenet

    with ResultsStore(opts.store) as db:
        rows = {r["method"]: r["metrics"] for r in db.records("images")}
    assert set(rows) == {"deterministic", "mc-dropout", "mcbn", "ensemble"}
    job = opts.jobs()[0]
    data = ij._data(job.split, job.n_val, job.n_train, job.n_test, job.n_ood)
    folder = next(p for p in (tmp_path / "nets").iterdir() if "deterministic-s0-" in p.name)
    net = lenet(norm="batch")
    net.load_state_dict(read_bundle(folder)[0])
    with torch.no_grad():
        wrong = (net.eval()(data["test"][0]).argmax(-1) != data["test"][1]).float().mean()
    assert rows["deterministic"]["error"] == pytest.approx(wrong.item())
    assert rows["deterministic"]["n"] == {"train": 200, "val": 200, "test": 100, "ood": 80,
                                          "ood_digits": 80, "corrupt": 40}  # fmt: skip
    assert [s["b"] for s in rows["mcbn"]["mcbn_sweep"]] == [16, 32]
    for method in ("deterministic", "mcbn", "ensemble", "mc-dropout"):
        for key in ("ood", "ood_digits"):  # both OOD sets get every score
            assert set(rows[method][key]) == {"max_prob", "max_logit", "energy", "entropy",
                                              "mutual_information", "mahalanobis"}  # fmt: skip
        # the method's predict time beside the deterministic network's, from the same job
        r = rows[method]
        assert r["time_ratio"] == pytest.approx(r["timed_ms_per_1000"] / r["det_ms_per_1000"])
    assert len(rows["mc-dropout"]["corruption"]["gaussian"]) == 2

    again = images.run(opts)  # every row is done: nothing is recomputed
    assert "0 finished, 4 skipped" in again

    # TTA rows augment the networks the deterministic and MC dropout rows trained (loaded
    # from the checkpoints, not trained again); the weight-sharing ensembles train M = the
    # ensemble's 2 members and have rows on every table
    text = images.run(replace(opts, methods=("tta", "mc-dropout-tta", "batch-ensemble",
                                             "packed-ensemble")))  # fmt: skip
    with ResultsStore(opts.store) as db:
        rows = {r["method"]: r["metrics"] for r in db.records("images")}
    for name in ("tta", "mc-dropout-tta"):
        assert rows[name]["training"]["cached"] and rows[name]["n"] == rows["mc-dropout"]["n"]
        assert rows[name]["uncertainty"]["test"] != rows["deterministic"]["uncertainty"]["test"]
    assert rows["batch-ensemble"][KEY]["class"] == "BatchEnsemble"  # its defaults recorded
    for name in ("batch-ensemble", "packed-ensemble"):
        assert rows[name]["samples_drawn"] == 2  # T = M, not the job's 3
    for name in ("batch-ensemble", "packed-ensemble"):
        assert not rows[name]["training"]["cached"]
        assert rows[name]["uncertainty"]["test"]["epistemic"] > 0  # the members differ
        assert f"| {name} | 1 | yes |" in text  # the summary: one seed, one pass
        assert text.count(f"| {name} |") >= 6  # summary, accuracy, 2 OOD sets, coverage

    # --export: the rows travel as a file, and a fresh store imported from it is the same page
    # (the figures drawn again) without running anything
    export = tmp_path / "rows.jsonl.gz"
    opts = replace(opts, methods=(*ij.PRESETS["quick"].methods, "tta", "mc-dropout-tta",
                                  "batch-ensemble", "packed-ensemble"))  # fmt: skip
    text = images.run(replace(opts, export=str(export)))
    lines = gzip.decompress(export.read_bytes()).decode().splitlines()
    assert len(lines) == 8 and "0 finished, 8 skipped" in text
    moved = tmp_path / "moved"
    (tmp_path / "images").rename(moved)
    runs = tmp_path / "notes" / "runs.md"  # --preamble: under the title, links rebased
    runs.parent.mkdir()
    runs.write_text("> Ran twice; rows in [the export](../rows.jsonl.gz).\n")
    fresh = images.run(replace(opts, export=str(export), store=str(tmp_path / "fresh.db"),
                               preamble=str(runs)))  # fmt: skip
    assert "0 finished, 8 skipped" in fresh and "\nMachine of this call, which ran no job" in fresh
    title, rest = fresh.split("\n", 1)
    assert rest.startswith("\n> Ran twice; rows in [the export](rows.jsonl.gz).\n\nCommand:")
    rest = rest.replace("\n> Ran twice; rows in [the export](rows.jsonl.gz).\n", "", 1)
    rest = rest.replace("fresh.db", "r.db").replace(f" --preamble {runs}", "")
    assert _without_call_line(f"{title}\n{rest}") == _without_call_line(text)
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == sorted(
        p.name for p in moved.iterdir())  # fmt: skip

    # a row made under another default is named on the page (job keys do not hold defaults)
    assert "other defaults" not in fresh
    with sqlite3.connect(tmp_path / "fresh.db") as db:
        (raw,) = db.execute("SELECT metrics FROM runs WHERE method = 'batch-ensemble'").fetchone()
        m = json.loads(raw)
        m[KEY]["defaults"]["members"] = 7
        db.execute("UPDATE runs SET metrics = ? WHERE method = 'batch-ensemble'", (json.dumps(m),))
    stale = images.run(replace(opts, store=str(tmp_path / "fresh.db")))
    assert "batch-ensemble (1 rows: members 7 → 4)" in stale


def _without_call_line(page: str) -> str:
    return "\n".join(line for line in page.splitlines() if not line.startswith("This call:"))
