"""Gal's 2018 per-split UCI results: the loader against the summary lines of Gal's own logs, the
paired comparison against numpy/scipy on made-up rows, and the page's labels (the ICML 2016 ±
is a standard deviation over splits and is never called a standard error)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from scipy import stats

from bayesify.bench.uci import page as uci_page
from bayesify.bench.uci.gal import GAL_2016
from bayesify.bench.uci.gal2018_results import (
    Gal2018,
    load_gal_2018,
    log_summary,
    paired_difference,
    read_log,
    results_dir,
)
from bayesify.bench.uci.gal2018_sections import comparisons, paired_counts, summary_lines
from bayesify.bench.uci.rows import cells
from bayesify.data import DataError, data_root
from bayesify.data.uci import UCI_DATASETS, uci_n_splits


def _need_results() -> None:
    try:
        results_dir("yacht").resolve(strict=True)
    except (DataError, FileNotFoundError) as e:
        pytest.skip(f"Gal's 2018 UCI results not found: {e}")


@pytest.mark.parametrize("name", UCI_DATASETS)
def test_per_split_results_reproduce_gals_log(name):
    """Mean, std and std error recomputed from the per-split files equal the log's lines to
    their printed six decimals ('errors': weight-scaled RMSE, 'MC errors': MC RMSE, 'lls')."""
    _need_results()
    gal = load_gal_2018(name)
    n = uci_n_splits(name, "gal")
    assert len(gal.ll) == len(gal.rmse) == len(gal.rmse_standard) == len(gal.tau) == n
    log = read_log(results_dir(name) / "log_100_xepochs_1_hidden_layers.txt")
    assert set(log) == {"errors", "MC errors", "lls"}
    for line, values in (("errors", gal.rmse_standard), ("MC errors", gal.rmse), ("lls", gal.ll)):
        mean, std, se = log_summary(values)
        assert np.std(values) == pytest.approx(std, rel=1e-12)  # Gal's divisor: n
        for mine, printed in zip((mean, std, se), log[line], strict=True):
            assert abs(mine - printed) <= 5e-7 + 1e-12, (name, line, mine, printed)
    assert gal.epochs == (2000 if name == "protein-tertiary-structure" else 4000)
    # τ chosen per split from the dataset's grid (original target units)
    grid = np.loadtxt(data_root() / "uci" / name / "tau_values.txt")
    assert all(np.isclose(grid, t).any() for t in gal.tau)


def test_a_missing_results_folder_is_a_data_error(tmp_path):
    (tmp_path / "uci" / "yacht" / "results").mkdir(parents=True)
    with pytest.raises(DataError, match="cannot read"):
        load_gal_2018("yacht", root=tmp_path)


def _gal(name: str, ll: list[float], rmse: list[float]) -> Gal2018:
    return Gal2018(name, tuple(ll), tuple(rmse), tuple(rmse), (0.5,) * len(ll), 4000)


def _rec(method, lik, dataset, split, ll, rmse, seed=0):
    return {"protocol": "gal", "experiment": "gal-uci", "method": method, "likelihood": lik,
            "dataset": dataset, "split": split, "seed": seed, "config_hash": f"{method}{lik}",
            "created": 1.0, "seconds": 1.0, "ll": ll, "rmse": rmse,
            "config": {"epochs": 40, "batch_size": 32, "dropout_rates": [0.01, 0.05],
                       "samples": 100}}  # fmt: skip


# made-up per-split results: Gal 2018 and ours (homoscedastic MC dropout; an ensemble)
THEIRS = {
    "yacht": _gal("yacht", [-1.2, -1.3, -1.1, -1.25], [0.6, 0.7, 0.5, 0.65]),
    "concrete": _gal("concrete", [-2.9, -3.0, -2.95, -2.9], [4.8, 5.0, 4.9, 4.7]),
    "energy": _gal("energy", [-1.2, -1.22, -1.19, -1.21], [0.5, 0.55, 0.52, 0.51]),
}
OURS = {  # split -> (LL, RMSE); yacht lacks split 1, energy has a split Gal has not (7)
    "yacht": {0: (-1.25, 0.7), 2: (-1.05, 0.55), 3: (-1.32, 0.6)},
    "concrete": {0: (-3.1, 5.3), 1: (-3.15, 5.4), 2: (-3.05, 5.2), 3: (-3.2, 5.5)},
    "energy": {0: (-1.0, 0.45), 1: (-1.1, 0.5), 2: (-1.05, 0.49), 3: (-0.9, 0.47), 7: (9.0, 0.0)},
}


def _records() -> list[dict]:
    recs = [_rec("mc-dropout", "homoscedastic", d, s, ll, rmse)
            for d, splits in OURS.items() for s, (ll, rmse) in splits.items()]  # fmt: skip
    # two seeds on yacht's split 0: the split's value is their mean (-1.25)
    recs[0] = {**recs[0], "ll": -1.2}
    recs.append({**recs[0], "seed": 1, "ll": -1.3})
    for method, lik, shift in (("ensemble", "heteroscedastic", 0.2), ("bbb", "homoscedastic", -1)):
        for d, splits in OURS.items():
            recs += [_rec(method, lik, d, s, ll + shift, r)
                     for s, (ll, r) in splits.items() if s < 4]  # fmt: skip
    return recs


def test_paired_difference_matches_numpy_and_scipy():
    table = cells(_records())
    found = {(c.dataset, c.label): c for c in comparisons(table, THEIRS)}
    for d, splits in OURS.items():
        s = [k for k in sorted(splits) if k < 4]
        for key, col in (("ll", 0), ("rmse", 1)):
            ours = np.array([splits[k][col] for k in s])
            theirs = np.array([getattr(THEIRS[d], key)[k] for k in s])
            p = getattr(found[(d, "mc-dropout homoscedastic")], key)
            assert p.n == len(s)
            assert p.mean == pytest.approx(np.mean(ours - theirs), abs=1e-12)
            assert p.se == pytest.approx(stats.sem(ours - theirs), rel=1e-9)
            assert p.z == pytest.approx(stats.ttest_rel(ours, theirs).statistic, rel=1e-9)
            other = getattr(found[(d, "best other")], key)  # the ensemble: LL + 0.2
            assert other.mean == pytest.approx(np.mean(ours + 0.2 * (col == 0) - theirs))
    assert {c.method for c in comparisons(table, THEIRS) if c.label == "best other"} == {"ensemble"}
    # counts, by the definition: mean diff >= -SE (LL), <= +SE (RMSE)
    counts = paired_counts(comparisons(table, THEIRS))["mc-dropout homoscedastic"]
    expect_ll, expect_rmse = [], []
    for d, splits in OURS.items():
        s = [k for k in sorted(splits) if k < 4]
        for key, col, out, sign in (("ll", 0, expect_ll, 1), ("rmse", 1, expect_rmse, -1)):
            diff = np.array([splits[k][col] - getattr(THEIRS[d], key)[k] for k in s])
            if sign * diff.mean() >= -stats.sem(diff):
                out.append(d)
    assert [d for d, _ in counts["ll_within"]] == sorted(expect_ll, key=UCI_DATASETS.index)
    assert [d for d, _ in counts["rmse_within"]] == sorted(expect_rmse, key=UCI_DATASETS.index)
    assert expect_ll == ["yacht", "energy"]  # the made-up rows cover both outcomes
    assert counts["seen"] == 3


def test_paired_difference_edge_cases():
    assert paired_difference({}, [1.0]).n == 0
    one = paired_difference({0: 2.0, 5: 9.0}, [1.0, 1.0])  # split 5: Gal has no such split
    assert (one.n, one.mean) == (1, 1.0) and not one.within_one_se(True)


def test_page_labels_2016_as_std_and_prints_the_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(uci_page, "load_records", lambda stores: _records())
    text = uci_page.write_page(tmp_path / "uci.md", stores=[], command="cmd", run_note="note",
                               gal2018=THEIRS)  # fmt: skip
    figures_2016 = [f"{g[2]:.2f} ± {g[3]:.2f}" for d, g in GAL_2016.items() if d in OURS]
    assert all(f in text for f in figures_2016)
    assert "± std over splits (as printed in the ICML 2016 table)" in text
    for paragraph in re.split(r"\n\s*\n", text):
        if "2016" in paragraph or any(f in paragraph for f in figures_2016):
            low = paragraph.lower()
            assert "standard error" not in low and "std. error" not in low, paragraph
            assert "std error" not in low, paragraph
    summary = next(p for p in text.split("\n\n") if p.startswith("**Summary**"))
    assert "**2 of 9** homoscedastic (energy, yacht), worse on 1 (concrete, z = " in summary
    assert "epochs 40" in summary and "against 4,000" in summary
    # Gal 2018's column: mean ± standard error over the splits our rows cover (yacht: 0, 2, 3)
    theirs = np.array(THEIRS["yacht"].ll)[[0, 2, 3]]
    assert f"| {theirs.mean():.2f} ± {stats.sem(theirs):.2f} (3) | -1.55 ± 0.12 |" in text


def test_without_gals_results_the_summary_says_so():
    lines = summary_lines(cells(_records()), {})
    assert "not found" in lines[0] and "standard error" not in lines[0]


def test_the_summary_names_the_preset_the_mc_dropout_rows_ran():
    def summary(config: dict) -> str:
        recs = [{**r, "config": config} for r in _records()]
        return summary_lines(cells(recs), THEIRS)[0]

    quick = {"epochs": 200, "batch_size": 32, "dropout_rates": [0.01, 0.05], "lr": 0.01,
             "samples": 100}  # fmt: skip
    assert "our MC dropout (quick preset) is within" in summary(quick)  # epochs may be set
    paper = {"epochs": 400, "batch_size": 128, "dropout_rates": [0.005, 0.01, 0.05, 0.1],
             "lr": 0.001, "samples": 1000}  # fmt: skip
    assert "our MC dropout (paper preset) is within" in summary(paper)
    neither = summary({**quick, "samples": 500})
    assert "our MC dropout is within" in neither and "preset)" not in neither
