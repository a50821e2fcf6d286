"""Finished rows travel as text: export a store, import it into a fresh one, and the runner
skips those jobs and the page is the same; rows.csv gives back its rows' keys and numbers."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bayesify.bench.runner import job_config, job_key, run_jobs
from bayesify.bench.store import ResultsStore, RowKey
from bayesify.bench.store_io import RECOVERED, export_rows, import_rows, read_rows, same_numbers
from bayesify.bench.uci.command import EXPORT_DIGITS
from bayesify.bench.uci.jobs import (
    GAL_EXPERIMENT,
    METHODS_EXPERIMENT,
    TEYE_EXPERIMENT,
    TeyeUCIJob,
    mc_dropout_job,
    method_job,
)
from bayesify.bench.uci.page import write_page
from bayesify.bench.uci.recover import recover_csv
from bayesify.cli import app

LIKS = ("homoscedastic", "heteroscedastic")


def _jobs() -> dict[str, list[Any]]:
    """Real job keys of both protocols (no data needed to make them)."""
    return {
        GAL_EXPERIMENT: [mc_dropout_job(d, s, lik, "quick")
                         for d in ("yacht", "energy") for s in range(3) for lik in LIKS],
        METHODS_EXPERIMENT: [method_job(m, d, s, lik, "quick")
                             for m in ("mcbn", "bbb") for d in ("yacht", "energy")
                             for s in range(3) for lik in LIKS],
        TEYE_EXPERIMENT: [TeyeUCIJob(m, "yacht", s) for s in range(3)
                          for m in ("mcbn", "mc-dropout")],
    }  # fmt: skip


def _score(job: Any) -> dict[str, Any]:
    """Metrics shaped as the UCI jobs' (scalars, chosen value, 10 uncertainty–error bins)."""
    rng = random.Random(str(job))
    out = {"rmse": rng.uniform(0.5, 3), "crps": rng.uniform(0.3, 2),
           "cu_crps": rng.uniform(0.3, 2), "pll_norm": rng.gauss(10, 5),
           "crps_norm": rng.gauss(10, 5), "mean_std": rng.uniform(0.5, 2),
           "ue_std": sorted(rng.uniform(0.1, 3) for _ in range(10)),
           "ue_rmse": [rng.uniform(0.1, 3) for _ in range(10)]}  # fmt: skip
    if isinstance(job, TeyeUCIJob):
        out.update(pll=-rng.uniform(1, 3), cu_pll=-rng.uniform(1, 3),
                   seed_pll_norm=[out["pll_norm"]], seed_crps_norm=[out["crps_norm"]])  # fmt: skip
    else:
        out.update(ll=-rng.uniform(1, 3), cu_ll=-rng.uniform(1, 3))
        if job.method == "mc-dropout":
            out["dropout"] = 0.01
        else:
            out["chosen"] = rng.choice(job.grid)
    return out


def _fill(path: Path, fn: Any = _score) -> dict[str, Any]:
    return {e: run_jobs(e, jobs, fn, path, progress=False) for e, jobs in _jobs().items()}


def _page(store: Path, out: Path) -> tuple[str, str]:
    """The page's markdown without its two lines naming the store, and its rows.csv."""
    text = write_page(out, stores=[store], command="cmd", run_note="note")
    kept = [line for line in text.splitlines() if not line.startswith("Stores read:")]
    return "\n".join(kept), (out.parent / out.stem / "rows.csv").read_text()


def _n_jobs() -> int:
    return sum(len(j) for j in _jobs().values())


def test_imported_rows_are_skipped_and_give_the_same_page(tmp_path):
    original, fresh, export = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "store.jsonl"
    _fill(original)
    assert export_rows(original, export, digits=EXPORT_DIGITS) == _n_jobs()
    first = import_rows(fresh, read_rows(export))
    assert (first.added, first.kept, first.replaced) == (_n_jobs(), 0, 0)

    calls = []
    summaries = _fill(fresh, lambda job: calls.append(job) or _score(job))
    assert calls == []  # no job recomputed
    assert all(not s.finished and len(s.skipped) == len(_jobs()[e])
               for e, s in summaries.items())  # fmt: skip
    with ResultsStore(original) as a, ResultsStore(fresh) as b:
        old, new = a.records(), b.records(status=None)
    assert len(new) == _n_jobs() and {r["status"] for r in new} == {"done"}
    assert {r["attempts"] for r in new} == {0}  # imported, never started here

    def by_key(rows: list[dict[str, Any]]) -> dict[RowKey, tuple]:
        return {RowKey.of(r): (r["created"], r["seconds"], r["config"]) for r in rows}

    assert by_key(new) == by_key(old)  # the original rows' times and configs

    text_a, csv_a = _page(original, tmp_path / "a" / "uci.md")
    text_b, csv_b = _page(fresh, tmp_path / "b" / "uci.md")
    assert text_a == text_b and csv_a == csv_b
    assert "| yacht |" in text_a and "ue_gal_yacht.png" in text_a and "recovered" not in text_a
    assert (tmp_path / "b" / "uci" / "ue_teye_yacht.png").stat().st_size > 2_000

    # importing the same file again adds nothing; exporting again gives the same bytes
    again = import_rows(fresh, read_rows(export))
    assert (again.added, again.kept) == (0, _n_jobs())
    with ResultsStore(fresh) as b:
        assert len(b.records(status=None)) == _n_jobs()
    export_rows(fresh, tmp_path / "again.jsonl", digits=EXPORT_DIGITS)
    assert (tmp_path / "again.jsonl").read_bytes() == export.read_bytes()


def test_export_is_sorted_exact_and_rounds_only_the_plot_bins(tmp_path):
    store, export = tmp_path / "a.db", tmp_path / "store.jsonl"
    _fill(store)
    export_rows(store, export, digits=EXPORT_DIGITS)
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    keys = [tuple(r[k] for k in ("experiment", "method", "dataset", "split", "seed",
                                 "config_hash")) for r in lines]  # fmt: skip
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    with ResultsStore(store) as db:
        stored = {job_key(e, j): None for e, jobs in _jobs().items() for j in jobs}
        records = {(r["experiment"], r["method"], r["dataset"], r["split"], r["config_hash"]): r
                   for r in db.records()}  # fmt: skip
    assert len(stored) == len(lines)
    for line in lines:
        r = records[(line["experiment"], line["method"], line["dataset"], line["split"],
                     line["config_hash"])]  # fmt: skip
        assert line["metrics"]["rmse"] == r["metrics"]["rmse"]  # scalars exact
        assert line["metrics"]["ue_std"] == pytest.approx(r["metrics"]["ue_std"], rel=1e-5)
        assert all(len(repr(v)) <= 13 for v in line["metrics"]["ue_std"])  # 6 digits


def test_a_done_row_is_never_overwritten_and_a_bad_hash_is_refused(tmp_path):
    store, export = tmp_path / "a.db", tmp_path / "store.jsonl"
    job = mc_dropout_job("yacht", 0, "homoscedastic", "quick")
    run_jobs(GAL_EXPERIMENT, [job], _score, store, progress=False)
    export_rows(store, export)
    row = json.loads(export.read_text())
    other = tmp_path / "b.db"
    import_rows(other, [{**row, "metrics": {**row["metrics"], "rmse": 99.0}}])
    summary = import_rows(other, [row])
    assert (summary.added, summary.kept) == (0, 1)
    with ResultsStore(other) as db:
        assert db.records()[0]["metrics"]["rmse"] == 99.0  # the first import's row stays
    bad = {**row, "config": {**row["config"], "epochs": 1}}
    with pytest.raises(ValueError, match="is not the hash of its config"):
        import_rows(tmp_path / "c.db", [row, bad])
    with ResultsStore(tmp_path / "c.db") as db:
        assert db.records() == []  # checked before anything is written
    assert json.loads(json.dumps(job_config(job))) == row["config"]


def test_rows_csv_recovers_keys_configs_and_numbers_but_not_the_bins(tmp_path):
    original, recovered, export = tmp_path / "a.db", tmp_path / "r.db", tmp_path / "s.jsonl"
    _fill(original)
    text_a, csv_a = _page(original, tmp_path / "a" / "uci.md")
    rows, lost = recover_csv(tmp_path / "a" / "uci" / "rows.csv")
    assert lost == [] and len(rows) == _n_jobs()
    assert import_rows(recovered, rows).added == _n_jobs()
    # the runner skips recovered rows too
    assert all(not s.finished for s in _fill(recovered, lambda j: pytest.fail("ran")).values())
    text_r, csv_r = _page(recovered, tmp_path / "r" / "uci.md")
    assert csv_r == csv_a  # every number of every row, and its key
    # every table but risk–coverage's, which needs the bins (the recovered page has none)
    selective = text_a.index("### Selective prediction")
    without = text_a[:selective] + text_a[text_a.index("Uncertainty–error plots", selective) :]
    tables = [line for line in without.splitlines() if line.startswith("|")]
    assert tables == [line for line in text_r.splitlines() if line.startswith("|")]
    assert "### Selective prediction" not in text_r and "risk_coverage_gal.png" not in text_r
    assert "ue_gal_yacht.png" not in text_r and "ue_teye_yacht.png" not in text_r
    assert "36 of the 36 rows were recovered" in text_r  # Gal's; Teye's: 6 of the 6
    with ResultsStore(recovered) as db:
        recs = db.records()
    assert all(RECOVERED in r["metrics"] and "ue_std" not in r["metrics"] for r in recs)

    # a full row (the recomputation) replaces its recovered row when the numbers agree...
    export_rows(original, export)
    full = read_rows(export)
    changed = next(r for r in full if r["experiment"] == GAL_EXPERIMENT)
    changed["metrics"] = {**changed["metrics"], "ll": changed["metrics"]["ll"] + 0.5}
    summary = import_rows(recovered, full)
    assert (summary.replaced, summary.kept, len(summary.conflicts)) == (_n_jobs() - 1, 1, 1)
    with ResultsStore(recovered) as db:
        still = [r for r in db.records() if RECOVERED in r["metrics"]]
    assert len(still) == 1 and RowKey.of(still[0]) == RowKey.of(changed)  # kept
    # the true row replaces it; then the page is the original's, figures included
    summary = import_rows(recovered, read_rows(export))
    assert (summary.replaced, summary.kept) == (1, _n_jobs() - 1)
    assert _page(recovered, tmp_path / "r" / "uci.md") == (text_a, csv_a)


def test_cli_seeds_a_store_and_exports_it(tmp_path):
    original, export, page = tmp_path / "a.db", tmp_path / "store.jsonl", tmp_path / "uci.md"
    _fill(original)
    export_rows(original, export, digits=EXPORT_DIGITS)
    fresh, out = tmp_path / "b.db", tmp_path / "again.jsonl"
    args = ["bench", "uci", "--report-only", "--store", str(fresh), "--seed-from", str(export),
            "--export", str(out), "--out", str(page)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"imported {_n_jobs()} added, 0 kept" in page.read_text()
    assert "\nMachine of this call, which ran no job" in page.read_text()  # not where rows ran
    assert out.read_bytes() == export.read_bytes()
    result = CliRunner().invoke(app, [*args[:-2], "--seed-from", str(tmp_path / "none.jsonl")])
    assert result.exit_code == 2 and "no rows to import" in result.output


def test_a_recomputation_with_a_new_metric_replaces_the_row_it_reproduces(tmp_path):
    # rows scored before a metric existed (the epistemic share) gain it when a recomputation
    # of the same job reproduces every number they hold, the exported plot data's 6 digits too
    old, new = tmp_path / "old.db", tmp_path / "new.db"
    _fill(old)
    _fill(new, lambda job: {**_score(job), "epistemic_share": 0.25})
    export_rows(old, tmp_path / "old.jsonl", digits=EXPORT_DIGITS)
    export_rows(new, tmp_path / "new.jsonl")
    stored, recomputed = read_rows(tmp_path / "old.jsonl"), read_rows(tmp_path / "new.jsonl")
    off = next(r for r in recomputed if r["experiment"] == METHODS_EXPERIMENT)
    off["metrics"] = {**off["metrics"], "rmse": off["metrics"]["rmse"] * 1.01}  # not reproduced
    seeded = tmp_path / "seeded.db"
    assert import_rows(seeded, stored).added == _n_jobs()
    summary = import_rows(seeded, recomputed)
    assert (summary.replaced, summary.kept, len(summary.conflicts)) == (_n_jobs() - 1, 1, 1)
    with ResultsStore(seeded) as db:
        metrics = {RowKey.of(r): r["metrics"] for r in db.records()}
    assert "epistemic_share" not in metrics[RowKey.of(off)]  # the stored row is kept
    assert sum("epistemic_share" in m for m in metrics.values()) == _n_jobs() - 1
    # a row holding no more metrics than the stored one never replaces it
    other = [{**r, "metrics": {**r["metrics"], "rmse": 9.0}} for r in stored]
    assert import_rows(seeded, other).kept == _n_jobs()


def test_a_rerun_replaces_its_jobs_rows_whatever_their_numbers(tmp_path):
    # rows whose method's sampling changed since they ran are rerun under the current code on
    # purpose: --rerun-from replaces them, counts those whose numbers moved, keeps the others
    old, new, page = tmp_path / "old.db", tmp_path / "new.db", tmp_path / "uci.md"
    _fill(old)
    moved = {"ll": -7.5, "epistemic_share": 0.25}  # a test LL no stored row has
    rerun = [j for j in _jobs()[METHODS_EXPERIMENT] if j.method == "mcbn"]
    run_jobs(METHODS_EXPERIMENT, rerun, lambda job: {**_score(job), **moved}, new, progress=False)
    partial = [{**r, "metrics": {"ll": -9.0}} for r in read_rows(new)][:1]  # lacks metrics
    assert import_rows(tmp_path / "o2.db", read_rows(old)).added == _n_jobs()
    assert import_rows(tmp_path / "o2.db", partial, rerun=True).kept == 1
    export = tmp_path / "old.jsonl"
    export_rows(old, export, digits=EXPORT_DIGITS)
    args = ["bench", "uci", "--report-only", "--store", str(tmp_path / "s.db"), "--seed-from",
            str(export), "--rerun-from", str(new), "--out", str(page)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert f"rerun imported 0 added, 0 kept (already done), {len(rerun)} replaced " \
           f"({len(rerun)} with other numbers: a rerun)" in text  # fmt: skip
    with ResultsStore(tmp_path / "s.db") as db:
        rows = db.records()
    lls = {(r["method"], r["metrics"]["ll"]) for r in rows if r["experiment"] == METHODS_EXPERIMENT}
    assert {ll for m, ll in lls if m == "mcbn"} == {-7.5}
    assert all(ll != -7.5 for m, ll in lls if m == "bbb")
    assert "-7.50 ± 0.00" in text  # the page shows the rerun's numbers
    # a second import of the same rerun changes nothing
    again = import_rows(tmp_path / "s.db", read_rows(new), rerun=True)
    assert (again.replaced, again.changed) == (len(rerun), 0)


def test_a_recomputation_agrees_to_float32_precision_not_bit_by_bit():
    # values of one row recomputed on the same machine (MCBN, Teye's yacht split 1)
    recovered = {"rmse": 2.131425142288208, "pll_norm": 40.374918071668816, RECOVERED: "x"}
    full = {"rmse": 2.131424903869629, "pll_norm": 40.37490258222061, "ue_std": [1.0]}
    assert same_numbers(recovered, full)
    assert not same_numbers(recovered, {**full, "rmse": 2.1315})
    assert not same_numbers({**recovered, "chosen": 32.0}, {**full, "chosen": 128.0})


def test_an_import_refuses_a_row_without_its_experiments_metrics(tmp_path):
    """A row with a valid key and hash but metrics {"bogus": 1} is not marked done: it would be
    skipped by the runner and break every page of the store."""
    store, export = tmp_path / "a.db", tmp_path / "store.jsonl"
    jobs = [mc_dropout_job("yacht", s, "homoscedastic", "quick") for s in (0, 1)]
    run_jobs(GAL_EXPERIMENT, jobs, _score, store, progress=False)
    export_rows(store, export)
    good, other = (json.loads(line) for line in export.read_text().splitlines())
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(good) + "\n" + json.dumps({**other, "metrics": {"bogus": 1}}) + "\n")
    fresh, page = tmp_path / "b.db", tmp_path / "uci.md"
    args = ["bench", "uci", "--report-only", "--store", str(fresh), "--seed-from", str(bad),
            "--out", str(page)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "bad.jsonl row 2: metrics lack rmse, ll (a finished gal-uci row has rmse, ll)" in said
    assert "Traceback" not in said and not page.exists()
    with ResultsStore(fresh) as db:
        assert db.records(status=None) == []  # checked before anything is written


def test_a_damaged_store_or_file_of_rows_is_one_line(tmp_path):
    garbage = tmp_path / "results.db"
    garbage.write_bytes(b"not a database at all" * 100)
    result = CliRunner().invoke(app, ["report", str(garbage)])
    assert result.exit_code == 2 and "is not a readable results store" in result.output
    assert "Traceback" not in result.output
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"experiment": "gal-uci"}\n{not json\n')
    for source in (garbage, rows):
        args = ["bench", "uci", "--report-only", "--store", str(tmp_path / "s.db"),
                "--seed-from", str(source), "--out", str(tmp_path / "uci.md")]  # fmt: skip
        result = CliRunner().invoke(app, args)
        said = " ".join(result.output.split())
        assert result.exit_code == 2 and said.startswith("error: "), result.output
        assert "Traceback" not in said
    assert "rows.jsonl:2: not a JSON row" in said
    # a store holding a done row without its metrics (imported before the check) is named
    with ResultsStore(tmp_path / "old.db") as db:
        job = mc_dropout_job("yacht", 0, "homoscedastic", "quick")
        db.finish(job_key(GAL_EXPERIMENT, job), {"bogus": 1}, 1.0, job_config(job))
    args = ["bench", "uci", "--report-only", "--store", str(tmp_path / "old.db"),
            "--out", str(tmp_path / "uci.md")]  # fmt: skip
    result = CliRunner().invoke(app, args)
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "is marked done but its metrics lack rmse, ll" in said
