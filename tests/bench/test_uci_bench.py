"""`bayesify bench uci`: jobs for both protocols, scores against scipy, resumable runs into one
store, and the page (tables, summary counts, CSV, figures) read from several stores."""

from __future__ import annotations

import csv
import math
import sqlite3

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.special import logsumexp
from typer.testing import CliRunner

from bayesify.bench.store import ResultsStore
from bayesify.bench.uci.command import UCIBenchOptions
from bayesify.bench.uci.gal_methods import (
    UCIMethodJob,
    score_predictive,
    uncertainty_error_bins,
)
from bayesify.bench.uci.page import summary_counts
from bayesify.bench.uci.rows import cells, load_records
from bayesify.cli import app
from bayesify.data import DataError, data_root

runner = CliRunner()


def _need_data():
    try:
        (data_root() / "uci" / "yacht").resolve(strict=True)
    except (DataError, FileNotFoundError) as e:
        pytest.skip(f"shared UCI data not found: {e}")


def test_uncertainty_error_bins_match_a_numpy_reference():
    g = torch.Generator().manual_seed(0)
    std, err = torch.rand(103, generator=g) + 0.1, torch.randn(103, generator=g)
    out = uncertainty_error_bins(std, err, bins=10)
    order = np.argsort(std.numpy(), kind="stable")
    for i, part in enumerate(np.array_split(order, 10)):
        assert out["ue_std"][i] == pytest.approx(std.numpy()[part].mean(), rel=1e-6)
        assert out["ue_rmse"][i] == pytest.approx(np.sqrt((err.numpy()[part] ** 2).mean()))
    assert out["ue_std"] == sorted(out["ue_std"])


def test_options_make_the_protocols_jobs_and_reject_bad_values():
    gal = UCIBenchOptions().jobs()  # quick: 5 small datasets x 3 splits
    methods = {j.method for _, j in gal}
    assert methods == {
        "mc-dropout",
        "ensemble",
        "bbb",
        "ibnn",
        "stochastic-norm",
        "mcbn",
        "laplace",
        "laplace-all",
        "swag",
        "vbll",
        "evidential-regression",
        "packed-ensemble",
        "batch-ensemble",
        "sngp",
    }
    be = [j for _, j in gal if j.method == "batch-ensemble"]  # both likelihoods, no grid
    assert len(be) == 5 * 3 * 2 and {j.grid for j in be} == {()}
    for name in ("vbll", "evidential-regression", "sngp"):  # homoscedastic only
        jobs = [j for _, j in gal if j.method == name]
        assert len(jobs) == 5 * 3 and {j.likelihood for j in jobs} == {"homoscedastic"}
    sngp = [j for _, j in gal if j.method == "sngp"]
    assert {j.grid for j in sngp} == {(1.0, 2.0)}  # the length-scale ℓ
    swag = [j for _, j in gal if j.method == "swag"]
    assert len(swag) == 5 * 3 * 2 and {j.grid for j in swag} == {(0.3, 1.0, 3.0, 10.0)}
    ens = [j for _, j in gal if j.method == "ensemble"]
    assert len(ens) == 5 * 3 and {j.likelihood for j in ens} == {"heteroscedastic"}
    assert {j.members for j in ens} == {5}
    bbb = [j for _, j in gal if j.method == "bbb"]
    assert len(bbb) == 5 * 3 * 2 and {j.grid for j in bbb} == {(0.1, 1.0)}
    full = UCIBenchOptions(methods=("ensemble",), datasets=("all",), splits=0).jobs()
    assert len(full) == 8 * 20 + 5  # protein has 5 standard splits
    big = [j for _, j in full if j.dataset == "protein-tertiary-structure"]
    assert {(j.hidden, j.epochs, j.batch_size) for j in big} == {(100, 40, 100)}
    teye = UCIBenchOptions(protocol="teye", datasets=("yacht",), splits=0).jobs()
    assert [(e, j.method, j.split) for e, j in teye][:3] == [
        ("uci-teye", "mcbn", 0),
        ("uci-teye", "mc-dropout", 0),
        ("uci-teye", "mcbn", 1),
    ]
    assert len(teye) == 2 * 5
    with pytest.raises(ValueError, match="unknown methods"):
        UCIBenchOptions(protocol="teye", methods=("ensemble",))
    with pytest.raises(ValueError, match="5 splits, got 7"):
        UCIBenchOptions(protocol="teye", splits=7)
    with pytest.raises(ValueError, match="needs a grid"):
        UCIMethodJob("bbb", "yacht", 0)


def test_swag_jobs_collect_for_as_many_epochs_as_they_trained():
    from bayesify.bench.runner import job_config
    from bayesify.bench.uci.gal_methods import build
    from bayesify.bench.uci.jobs import method_job

    small = method_job("swag", "yacht", 0, "homoscedastic", "quick")
    big = method_job("swag", "kin8nm", 0, "homoscedastic", "quick")
    assert (small.epochs, small.swag_epochs, big.epochs, big.swag_epochs) == (100, 100, 20, 20)
    assert build(small, 6, 1.0).config.swag_epochs == 100
    assert build(big, 8, 1.0).config.swag_epochs == 20
    # 20 collecting epochs is what the rows before the setting did: their keys are unchanged
    assert "swag_epochs" in job_config(small) and "swag_epochs" not in job_config(big)
    assert "swag_epochs" not in job_config(method_job("bbb", "yacht", 0, "homoscedastic", "quick"))


def test_teye_options_pick_the_preset_and_override_it():
    from bayesify.bench.uci.teye import UCISettings

    opts = UCIBenchOptions(protocol="teye", preset="paper", epochs=100, weight_decays=(1e-3,),
                           samples=50, datasets=("yacht",))  # fmt: skip
    s = opts.jobs()[0][1].settings()
    assert (s.preset, s.epochs, s.weight_decays, s.samples, s.bank_size) == (
        "paper", 100, (1e-3,), 50, 50,
    )  # fmt: skip
    assert s.batch_sizes == (32, 64, 128, 256, 512, 1024) and s.cv_folds == 5
    assert UCIBenchOptions(protocol="teye").jobs()[0][1].settings() == UCISettings()


def test_scores_match_scipy_mixture_and_constant_baseline():
    _need_data()
    from bayesify.data import load_uci
    from bayesify.methods import MCDropout
    from bayesify.models import mlp

    torch.manual_seed(0)
    data = load_uci("yacht", 0, protocol="gal")
    m = MCDropout(mlp(data.n_features, 1, (16,), norm=None, dropout=0.1), noise_objective="pll")
    m.fit((data.x_train, data.y_train), val=(data.x_val, data.y_val), epochs=3, progress=False)
    pred = m.predict(data.x_test, samples=7, seed=1)
    out = score_predictive(m, pred, data)
    mu, sd = float(data.scaler.y_mean), float(data.scaler.y_std)
    means = pred.samples.double().numpy() * sd + mu  # [T, N]
    y = data.y_test_original.double().numpy()
    noise = math.sqrt(m.noise_variance) * sd
    ll = logsumexp(stats.norm.logpdf(y, means, noise), axis=0) - math.log(7)
    assert out["ll"] == pytest.approx(ll.mean(), rel=1e-5)
    assert out["rmse"] == pytest.approx(np.sqrt(((means.mean(0) - y) ** 2).mean()), rel=1e-5)
    cu = stats.norm.logpdf(y, means.mean(0), math.sqrt(m.constant_variance) * sd)
    assert out["cu_ll"] == pytest.approx(cu.mean(), rel=1e-5)
    opt = (-0.5 * np.log(2 * np.pi * (means.mean(0) - y) ** 2) - 0.5).mean()
    assert out["pll_norm"] == pytest.approx(
        100 * (ll.mean() - cu.mean()) / (opt - cu.mean()), abs=1e-3
    )  # float32 scores: ×100 scale
    epistemic = means.var(0)  # population variance over the T samples, as the mixture's
    share = epistemic / (epistemic + noise**2)
    assert 0 < out["epistemic_share"] == pytest.approx(share.mean(), rel=1e-4)


def test_run_resumes_and_page_reads_several_stores(tmp_path):
    _need_data()
    store, other, page = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "uci.md"
    args = ["bench", "uci", "--datasets", "yacht", "--splits", "1", "--epochs", "2",
            "--methods", "ensemble,ibnn", "--likelihoods", "heteroscedastic",
            "--store", str(store), "--out", str(page)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    with ResultsStore(store) as s:
        rows = s.records("uci-gal")
    assert sorted(r["method"] for r in rows) == ["ensemble", "ibnn"]
    created = {r["method"]: r["created"] for r in rows}
    # the same command again: nothing is recomputed, every row is there once
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    with ResultsStore(store) as s:
        again = s.records("uci-gal", status=None)
    assert {r["method"]: r["created"] for r in again} == created and len(again) == 2
    assert "0 finished, 2 skipped" in page.read_text()
    # a Teye-protocol row in a second store; the page reads both (the first store wins)
    teye = ["bench", "uci", "--protocol", "teye", "--datasets", "yacht", "--splits", "1",
            "--epochs", "3", "--methods", "mcbn", "--store", str(other), "--out", str(page),
            "--read", str(store)]  # fmt: skip
    result = runner.invoke(app, teye)
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert "## Gal & Ghahramani's protocol" in text and "## Teye et al.'s protocol" in text
    assert "| yacht |" in text and "ensemble hetero" in text and "-1.55 ± 0.12" in text
    assert "45.58 ****" in text  # Teye's Table 1 MCBN PLL on yacht, with its stars
    with (tmp_path / "uci" / "rows.csv").open() as f:
        lines = list(csv.DictReader(f))
    assert sorted((r["protocol"], r["method"]) for r in lines) == [
        ("gal", "ensemble"), ("gal", "ibnn"), ("teye", "mcbn")]  # fmt: skip
    assert (tmp_path / "uci" / "ue_gal_yacht.png").stat().st_size > 2_000
    assert (tmp_path / "uci" / "ue_teye_yacht.png").stat().st_size > 2_000
    teye_row = next(r for r in load_records([other]) if r["protocol"] == "teye")
    assert len(teye_row["seed_pll_norm"]) == 1 and "cu_crps" in teye_row


def test_read_only_store_is_never_written(tmp_path):
    with pytest.raises(FileNotFoundError, match="no results store"):
        ResultsStore(tmp_path / "none.db", readonly=True)
    assert not (tmp_path / "none.db").exists()
    path = tmp_path / "s.db"
    ResultsStore(path).close()
    with ResultsStore(path, readonly=True) as s, pytest.raises(sqlite3.OperationalError):
        s.conn.execute("DELETE FROM runs")


def _rec(method, lik, dataset, ll, config="c", split=0, created=None):
    return {"protocol": "gal", "method": method, "likelihood": lik, "dataset": dataset,
            "split": split, "seed": 0, "config_hash": config, "ll": ll,
            "created": created}  # fmt: skip


def test_a_complete_rerun_supersedes_an_equally_large_older_run():
    old = [_rec("mc-dropout", "homoscedastic", "yacht", -1.7, "e40", s, created=100.0 + s)
           for s in range(3)]  # fmt: skip
    new = [_rec("mc-dropout", "homoscedastic", "yacht", -1.3, "e200", s, created=200.0 + s)
           for s in range(3)]  # fmt: skip
    for recs in (old + new, new + old):  # the order rows are read in does not matter
        shown = cells(recs)[("gal", "mc-dropout", "homoscedastic", "yacht")]
        assert [r["config_hash"] for r in shown] == ["e200"] * 3
    # a rerun that is not complete yet does not hide the run before it
    shown = cells(old + new[:2])[("gal", "mc-dropout", "homoscedastic", "yacht")]
    assert [r["config_hash"] for r in shown] == ["e40"] * 3


def test_summary_counts_the_issues_two_criteria():
    # Gal 2016 LL: boston -2.46 ± 0.25, concrete -3.04 ± 0.09, yacht -1.55 ± 0.12
    recs = [
        _rec("ensemble", "heteroscedastic", "bostonHousing", -2.40),  # beats Gal
        _rec("mc-dropout", "homoscedastic", "bostonHousing", -2.70),  # within 0.25
        _rec("mc-dropout", "homoscedastic", "concrete", -3.20),  # not within 0.09
        _rec("mc-dropout", "heteroscedastic", "concrete", -3.00),  # beats Gal
        _rec("mc-dropout", "heteroscedastic", "yacht", -1.60, config="old", split=0),
        _rec("mc-dropout", "heteroscedastic", "yacht", -9.0, config="new", split=0),
        _rec("mc-dropout", "heteroscedastic", "yacht", -9.0, config="new", split=1),
    ]
    table = cells(recs)
    assert [r["config_hash"] for r in table[("gal", "mc-dropout", "heteroscedastic", "yacht")]] == [
        "new", "new"]  # fmt: skip
    c = summary_counts(table)
    assert c["datasets"] == 3 and c["best_beats"] == 2
    assert c["best"]["bostonHousing"][:2] == ("ensemble", "heteroscedastic")
    assert c["mcdo"] == {"homoscedastic": 1, "heteroscedastic": 1}
    assert c["mcdo_seen"] == {"homoscedastic": 2, "heteroscedastic": 2}


def test_a_detail_rows_chosen_values_are_listed_in_numeric_order():
    from bayesify.bench.uci.page import _detail_line

    rows = [{"chosen": v, "seconds": 1.0} for v in (10.0, 3.0, 0.3, 3.0, 1.0, 32.0, 128.0)]
    cells = [c.strip() for c in _detail_line("d", "swag", "homoscedastic", rows).split("|")]
    assert cells[8] == "0.3, 1.0, 3.0, 10.0, 32.0, 128.0"
    assert [c.strip() for c in _detail_line("d", "m", "l", [{"chosen": None}]).split("|")][8] == "–"


def test_the_teye_flips_line_names_yacht_only_when_a_yacht_cell_flips():
    from bayesify.bench.uci.page import _flips_text

    power = "power-plant mcbn CRPS (-0.03 ns against 0.24 ***)"
    assert "yacht" not in _flips_text([power], {25})
    text = _flips_text([power, "yacht mcbn CRPS (42.99 **** against -56.39 ***)"], {25})
    assert "yacht is the small, high-variance set" in text and "(2)" in text


def test_the_teye_flips_line_explains_only_flips_that_are_not_ns(tmp_path):
    """A page whose every flip is ns has no 'others' to call unexplained (kin8nm and power at
    5 × 5 once printed it), and a run of the paper preset as it stands is not smaller."""
    from bayesify.bench.uci.page import _teye_section

    def rec(dataset, split, seed_values, config):
        return {"protocol": "teye", "method": "mcbn", "likelihood": "homoscedastic",
                "dataset": dataset, "split": split, "seed": 0, "config_hash": "c",
                "created": 1.0, "crps_norm": 0.0, "pll_norm": 0.0, "rmse": 4.0, "ll": -2.8,
                "crps": 2.2, "cu_ll": -2.8, "cu_crps": 2.2, "config": config,
                "seed_crps_norm": seed_values, "seed_pll_norm": seed_values}  # fmt: skip

    def flips(dataset, values, config):
        recs = [rec(dataset, s, v, config) for s, v in enumerate(values)]
        lines = _teye_section(cells(recs), tmp_path / "figures", tmp_path)
        return next(line for line in lines if line.startswith("Signs that differ"))

    quick = {"preset": "quick", "epochs": 0, "batch_sizes": [], "cv_samples": -1}
    # power: Table 1's CRPS and PLL both > 0; ours below 0 in both, so both flip, ns
    text = flips("power-plant", [[-0.3, 0.2], [0.1, -0.2], [-0.1, 0.05]], quick)
    assert "(2): power-plant mcbn CRPS" in text and " ns against " in text
    assert "The others" not in text and "smaller than the paper's" not in text
    # concrete: Table 1's PLL is -36.36, ours clearly above 0: a flip that is not ns
    clear = [[1.0, 1.1], [1.2, 0.9], [1.05, 1.0]]
    text = flips("concrete", clear, quick)
    assert "(1): concrete mcbn PLL" in text and " ns against " not in text
    assert text.endswith("The others are not explained yet: the run here is smaller than the "
                         "paper's (the preset's grid, epochs and test seeds).")  # fmt: skip
    paper = {**quick, "preset": "paper"}
    assert flips("concrete", clear, paper).endswith("The others are not explained yet.")
