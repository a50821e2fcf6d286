"""`bayesify bench uci`'s rule for methods that run homoscedastic only (SNGP, VBLL, evidential
regression), SNGP's job, the predict time per 1,000 rows beside the deterministic network, and
the page's lines for both."""

from __future__ import annotations

import statistics
import warnings
from types import SimpleNamespace

import pytest
import torch

from bayesify.bench.uci import predict_time
from bayesify.bench.uci.command import UCIBenchOptions
from bayesify.bench.uci.gal_methods import HOMOSCEDASTIC_ONLY, UCIMethodJob, build
from bayesify.bench.uci.jobs import GAL_METHODS, method_likelihoods
from bayesify.bench.uci.page import METHOD_ORDER, homoscedastic_only_note
from bayesify.bench.uci.predict_time_page import predict_time_section
from bayesify.bench.uci.rows import cells


def test_homoscedastic_only_methods_never_get_a_heteroscedastic_job():
    assert {"sngp", "vbll", "evidential-regression"} <= set(HOMOSCEDASTIC_ONLY)
    pick = ("sngp", "vbll", "evidential-regression", "packed-ensemble")
    both = UCIBenchOptions(methods=pick, datasets=("yacht",), splits=2,
                           likelihoods=("homoscedastic", "heteroscedastic")).jobs()  # fmt: skip
    got = sorted((j.method, j.likelihood, j.split) for _, j in both)
    assert got == sorted(
        [(m, "homoscedastic", s) for m in pick for s in (0, 1)]
        + [("packed-ensemble", "heteroscedastic", s) for s in (0, 1)]
    )
    hetero = UCIBenchOptions(methods=pick, datasets=("yacht",), splits=2,
                             likelihoods=("heteroscedastic",)).jobs()  # fmt: skip
    assert [(j.method, j.likelihood) for _, j in hetero] == [
        ("packed-ensemble", "heteroscedastic")] * 2  # fmt: skip
    for m in HOMOSCEDASTIC_ONLY:
        assert method_likelihoods(m, None) == ("homoscedastic",)
        assert method_likelihoods(m, ("heteroscedastic",)) == ()
        with pytest.raises(ValueError, match="homoscedastic only"):
            UCIMethodJob(m, "yacht", 0, likelihood="heteroscedastic", grid=(1.0,))
    assert method_likelihoods("ensemble", None) == ("heteroscedastic",)
    assert method_likelihoods("swag", None) == ("homoscedastic", "heteroscedastic")


def test_sngp_job_builds_an_sngp_with_the_grid_length_scale():
    from bayesify.methods import SNGP
    from bayesify.nn.random_feature_gp import RandomFeatureGP

    job = UCIMethodJob("sngp", "yacht", 3, likelihood="homoscedastic", grid=(1.0, 2.0))
    method = build(job, 6, 2.0)
    assert isinstance(method, SNGP)
    assert method.config.lengthscale == 2.0 and not method.config.heteroscedastic
    head = [m for m in method.net.modules() if isinstance(m, RandomFeatureGP)]
    assert len(head) == 1 and (head[0].in_features, head[0].out_features) == (50, 1)
    again = build(job, 6, 2.0)  # seeded by the split: the same network and random features
    for a, b in zip(method.net.state_dict().values(), again.net.state_dict().values(),
                    strict=True):  # fmt: skip
        assert torch.equal(a, b)


@pytest.mark.filterwarnings("ignore:.*never fitted")  # untrained: only its members are compared
@pytest.mark.parametrize("likelihood", ["homoscedastic", "heteroscedastic"])
def test_batch_ensemble_job_builds_its_defaults_seeded_by_the_split(likelihood):
    from bayesify.methods import BatchEnsemble

    job = UCIMethodJob("batch-ensemble", "yacht", 2, likelihood=likelihood)
    method = build(job, 6, None)
    assert isinstance(method, BatchEnsemble) and method.config.members == 4
    assert method.config.init_seed == 2 and method.config.likelihood == likelihood
    x = torch.randn(5, 6)
    pred = method.predict(x, samples=4, seed=0)
    assert pred.samples.shape[:2] == (4, 5)
    assert pred.samples.std(0).min() > 0  # the members differ from the first step
    again = build(job, 6, None).predict(x, samples=4, seed=0)
    assert torch.equal(pred.samples, again.samples)
    other = build(UCIMethodJob("batch-ensemble", "yacht", 3, likelihood=likelihood), 6, None)
    assert not torch.equal(other.predict(x, samples=4, seed=0).samples, pred.samples)


def test_every_bench_method_has_a_fixed_column_order():
    assert set(GAL_METHODS) <= set(METHOD_ORDER)


def _rec(method, lik, dataset, split, **metrics):
    return {"protocol": "gal", "method": method, "likelihood": lik, "dataset": dataset,
            "split": split, "seed": 0, "config_hash": "c", "ll": -1.0, "created": None,
            **metrics}  # fmt: skip


def test_page_names_the_homoscedastic_only_methods_that_have_rows():
    table = cells([_rec("sngp", "homoscedastic", "yacht", 0),
                   _rec("swag", "heteroscedastic", "yacht", 0)])  # fmt: skip
    note = homoscedastic_only_note(table)
    assert note.startswith("Homoscedastic only: sngp runs in the homoscedastic setting alone")
    assert HOMOSCEDASTIC_ONLY["sngp"] in note and "vbll" not in note
    assert homoscedastic_only_note(cells([_rec("swag", "homoscedastic", "yacht", 0)])) == ""


def test_thousand_rows_repeats_the_test_rows_in_order():
    x = torch.arange(21.0).reshape(7, 3)
    big = predict_time.thousand_rows(x)
    assert big.shape == (1000, 3)
    assert torch.equal(big, x[torch.arange(1000) % 7])


def test_median_seconds_warms_up_then_times_interleaved_rounds(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(predict_time.time, "perf_counter", lambda: clock[0])
    calls: list[str] = []
    costs = {"a": iter([9.0, 1.0, 3.0, 2.0, 5.0, 4.0]), "b": iter([9.0, 0.5, 0.1, 0.3, 0.2, 0.4])}

    def fn(k):
        def run():
            calls.append(k)
            clock[0] += next(costs[k])

        return run

    out = predict_time.median_seconds({"a": fn("a"), "b": fn("b")}, rounds=5)
    assert out == pytest.approx({"a": statistics.median([1, 3, 2, 5, 4]),
                                 "b": statistics.median([0.5, 0.1, 0.3, 0.2, 0.4])})  # fmt: skip
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a", "a", "b"]


@pytest.mark.parametrize(("method", "likelihood", "drawn"),
                         [("mc-dropout", "homoscedastic", 7),
                          ("packed-ensemble", "heteroscedastic", 4),
                          ("batch-ensemble", "homoscedastic", 4)])  # fmt: skip
def test_predict_times_time_the_method_beside_a_deterministic_net(method, likelihood, drawn):
    import bayesify
    from bayesify.models import mlp

    out = 2 if likelihood == "heteroscedastic" else 1
    net = mlp(5, out, (8,), norm=None, dropout=0.1 if method == "mc-dropout" else 0.0)
    m = {
        "mc-dropout": lambda: bayesify.MCDropout(net),
        "packed-ensemble": lambda: bayesify.PackedEnsemble(net, likelihood=likelihood),
        "batch-ensemble": lambda: bayesify.BatchEnsemble(net, likelihood=likelihood),
    }[method]()
    job = SimpleNamespace(method=method, likelihood=likelihood, hidden=8, samples=7, seed=0)
    det = predict_time.deterministic_net(job, 5)
    with warnings.catch_warnings():  # its noise is set: no warning is timed with it
        warnings.simplefilter("error")
        assert det.predict(torch.zeros(3, 5), samples=1).samples.shape[:2] == (1, 3)
    times = predict_time.predict_times(m, job, torch.randn(30, 5))
    # Packed-Ensembles and BatchEnsemble: their M = 4 members, whatever T the job asks for
    assert times["predict_samples"] == drawn
    assert times["predict_ms_per_1000"] > 0 and times["det_predict_ms_per_1000"] > 0


def test_predict_time_table_means_and_per_job_ratios():
    recs = [_rec("sngp", "homoscedastic", "yacht", 0, predict_ms_per_1000=60.0,
                 det_predict_ms_per_1000=1.0, predict_samples=100),
            _rec("sngp", "homoscedastic", "yacht", 1, predict_ms_per_1000=80.0,
                 det_predict_ms_per_1000=4.0, predict_samples=100),
            _rec("swag", "homoscedastic", "yacht", 0)]  # fmt: skip
    table = cells(recs)
    variants = [("swag", "homoscedastic"), ("sngp", "homoscedastic")]
    lines = predict_time_section(table, "gal", variants)
    body = [line for line in lines if line.startswith("| yacht")]
    # ms: 70 ± 10 (sample std 14.1 / √2); deterministic 2.5 ± 1.5; per-job ratios 60, 20: 40 ± 20
    assert body == ["| yacht | sngp | homoscedastic | 2 | 100 | 70.00 ± 10.00 | 2.50 ± 1.50 | "
                    "40.0 ± 20.0 |"]  # fmt: skip
    assert predict_time_section(cells(recs[2:]), "gal", variants) == []


def test_a_run_stores_predict_times_and_the_page_shows_sngp_homoscedastic_only(tmp_path):
    from uci_cli import run_bench_uci

    from bayesify.bench.store import ResultsStore

    run_bench_uci(tmp_path, "sngp,packed-ensemble", "homoscedastic,heteroscedastic")
    store, page = tmp_path / "a.db", tmp_path / "uci.md"
    with ResultsStore(store) as s:
        rows = s.records("uci-gal")
    got = sorted((r["method"], r["config"]["likelihood"]) for r in rows)
    assert got == [("packed-ensemble", "heteroscedastic"), ("packed-ensemble", "homoscedastic"),
                   ("sngp", "homoscedastic")]  # fmt: skip
    for r in rows:
        m = r["metrics"]
        assert m["predict_ms_per_1000"] > 0 and m["det_predict_ms_per_1000"] > 0
        assert m["predict_samples"] == (4 if r["method"] == "packed-ensemble" else 100)
    text = page.read_text()
    assert "sngp homo" in text and "sngp hetero" not in text
    assert "Homoscedastic only: sngp runs in the homoscedastic setting alone" in text
    assert "| yacht | sngp | homoscedastic | 1 | 100 |" in text  # its predict-time line
