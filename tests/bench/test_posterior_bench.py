"""``bayesify bench posterior`` killed with SIGKILL part-way resumes without recomputing the
finished rows (HMC references included), and its page says which runs are references and puts
each method's f(x) distance beside the floor of a second reference."""

from __future__ import annotations

import gzip
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

pytest.importorskip("numpyro")

from bayesify.bench.posterior.checks import page_reference

CLI = [sys.executable, "-c", "from bayesify.cli import main; main()"]


def _bench(tmp_path) -> list[str]:
    # one problem, two rows: the reference, then a method that reads its draws
    return [*CLI, "bench", "posterior", "--preset", "tiny", "--datasets", "toy-1d",
            "--methods", "mc-dropout",
            "--store", str(tmp_path / "r.db"), "--references", str(tmp_path / "refs"),
            "--page", str(tmp_path / "posterior.md")]  # fmt: skip


def _done(store) -> dict[tuple, tuple[float, int]]:
    if not Path(store).exists():  # read-only: a plain connect would leave an empty file, which
        return {}  # the run refuses as a damaged store
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT method, dataset, seed, created, attempts FROM runs WHERE status='done'"
        ).fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        conn.close()
    return {(m, d, s): (c, a) for m, d, s, c, a in rows}


@pytest.mark.slow
def test_sigkill_then_rerun_resumes_without_recomputing(tmp_path, caplog):
    from bayesify.bench.posterior.command import PosteriorOptions, run

    store = tmp_path / "r.db"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(tmp_path / "first.log", "w") as log:
        proc = subprocess.Popen(_bench(tmp_path), stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 600
        while not _done(store) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    before = _done(store)
    # the references (the floor's second one too) run first: killed before the method's row
    assert before and {m for m, _, _ in before} == {"hmc"}, f"{sorted(before)} done when killed"
    bundle = tmp_path / "refs"
    stamps = {p: p.stat().st_mtime_ns for p in bundle.rglob("*.safetensors")}

    # the rerun: the same command's run, in this process (a second interpreter would only add
    # its start-up; what is checked is what the store and the bundle folder hold after it)
    threads = torch.get_num_threads()  # run() sets one thread, as the command does
    try:
        with caplog.at_level(logging.INFO, logger="bayesify.bench"):
            run(PosteriorOptions(preset="tiny", datasets=("toy-1d",), methods=("mc-dropout",),
                                 store=str(store), references=str(bundle),
                                 page=str(tmp_path / "posterior.md")))  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    after = _done(store)
    assert set(after) == {("hmc", "toy-1d", 0), ("hmc", "toy-1d", 1), ("mc-dropout", "toy-1d", 0)}
    for key, (created, attempts) in before.items():
        assert after[key] == (created, attempts) and attempts == 1
    # the finished reference's draws were not sampled again: its files are untouched
    done_refs = [p for p in stamps if "toy-1d" in str(p)]
    assert done_refs and all(p.stat().st_mtime_ns == stamps[p] for p in done_refs)
    assert "skipped posterior/hmc/toy-1d" in caplog.text
    page = (tmp_path / "posterior.md").read_text()
    assert "| toy-1d | 0 |" in page and "| mc-dropout |" in page
    # each run is called a reference exactly when its largest R-hat is at most 1.05
    conn = sqlite3.connect(store)
    refs = conn.execute("SELECT dataset, seed, metrics FROM runs WHERE method='hmc'").fetchall()
    (method,) = conn.execute("SELECT metrics FROM runs WHERE method='mc-dropout'").fetchone()
    conn.close()
    for dataset, seed, metrics in refs:
        rhat = json.loads(metrics)["rhat_max"]
        head = f"| {dataset} | 0 | {seed} |"
        row = next(line for line in page.splitlines() if line.startswith(head))
        assert row.split(" | ")[-2] == "yes" if rhat <= 1.05 else "**no**" in row.split(" | ")[-2]
    # the page leads with f(x): W2 on f(x) beside the floor, which the second reference gave
    m = json.loads(method)
    assert m["floor_w2_f"] > 0 and m["w2_f"] > 0
    first = page.index("| mc-dropout | 10 |")
    assert first < page.index("## HMC diagnostics")
    assert page[first:].startswith(f"| mc-dropout | 10 | {m['w2_f']:.3f} | {m['floor_w2_f']:.3f} |")
    assert (tmp_path / "posterior" / "toy_1d.png").stat().st_size > 1000


def test_gal_rows_average_one_row_per_split_and_skip_ambiguous_methods(tmp_path):
    from bayesify.bench.posterior.report import gal_rows

    head = "protocol,experiment,method,likelihood,dataset,split,seed,config_hash,ll\n"
    rows = [
        "gal,gal-uci,bbb,homoscedastic,yacht,0,0,a,-1.0",
        "gal,gal-uci,bbb,homoscedastic,yacht,1,0,a,-2.0",
        "gal,gal-uci,bbb,homoscedastic,yacht,2,0,a,-9.0",  # not a split we ran
        "gal,gal-uci,bbb,heteroscedastic,yacht,0,0,b,-5.0",
        "teye,uci-teye,bbb,homoscedastic,yacht,1,0,c,-5.0",
        "gal,gal-uci,mcbn,homoscedastic,yacht,0,0,d,-1.0",
        "gal,gal-uci,mcbn,homoscedastic,yacht,0,0,e,-3.0",  # a second configuration
        "gal,gal-uci,mcbn,homoscedastic,yacht,1,0,d,-1.0",
        "gal,gal-uci,ibnn,homoscedastic,yacht,0,0,f,-1.0",  # split 1 missing
    ]
    csv = tmp_path / "rows.csv"
    csv.write_text(head + "\n".join(rows) + "\n")
    assert gal_rows(csv, "yacht", {0, 1}) == {"bbb": -1.5}
    assert gal_rows(tmp_path / "absent.csv", "yacht", {0}) == {}


def test_reference_rows_do_not_depend_on_the_methods_training_settings():
    from bayesify.bench.posterior.command import PosteriorOptions
    from bayesify.bench.runner import job_key

    hmc, methods = PosteriorOptions(preset="tiny").jobs()
    assert all(j.epochs == 0 and j.mc_samples == 0 for j in hmc)
    # a second reference per problem for the floor: another seed, the same settings otherwise
    assert sorted(j.seed for j in hmc) == [0, 0, 1, 1]
    assert {replace(j, seed=0) for j in hmc} == {j for j in hmc if j.seed == 0}
    assert all(j.epochs > 0 and j.mc_samples > 0 for j in methods)
    # the same reference whatever the methods train with: its key and draws are shared
    other = [replace(j, epochs=99) for j in methods]
    assert [job_key("posterior", j) for j in hmc] == [
        job_key("posterior", replace(j, epochs=0)) for j in hmc
    ]
    assert {j.reference_path() for j in other} == {j.reference_path() for j in hmc if not j.seed}


def test_fixed_noise_is_near_the_noise_the_data_were_drawn_with():
    from bayesify.bench.posterior.jobs import validation_noise
    from bayesify.bench.posterior.problems import Problem
    from bayesify.options import Task

    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 2, generator=g)
    y = x @ torch.tensor([0.8, -0.5]) + 0.3 * torch.randn(300, generator=g)
    none = torch.zeros(100, dtype=torch.bool)
    problem = Problem("lin", Task.REGRESSION, x[:200], y[:200], x[200:], y[200:], x[200:],
                      y[200:], ~none, none)  # fmt: skip
    sigma = validation_noise(problem, seed=0, steps=300)
    assert 0.25 < sigma < 0.36, sigma  # the RMSE of 100 draws of N(0, 0.3²): 0.3 ± 0.02


def test_deeper_datasets_get_their_own_tree_depth_and_reference():
    from bayesify.bench.posterior.command import PosteriorOptions, _expected_cost

    hmc, methods = PosteriorOptions(
        preset="quick", datasets=("toy-1d", "energy", "concrete")
    ).jobs()
    depth = {j.dataset: j.max_tree_depth for j in hmc}
    assert depth == {"toy-1d": 10, "energy": 12, "concrete": 11}
    # a method row is scored against the reference sampled at its dataset's depth
    page_refs = {j.reference_path() for j in hmc if not j.seed and j == page_reference(j)}
    assert {j.reference_path() for j in methods} == page_refs
    assert {j.dataset: j.samples for j in hmc} == {"toy-1d": 150, "energy": 450, "concrete": 150}
    assert "energy-0-seed0-c4-w300-s450-t1-d12-" in str(
        next(j for j in hmc if j.dataset == "energy").reference_path()
    )
    # the costlier reference is started first
    assert sorted(hmc, key=_expected_cost, reverse=True)[0].dataset == "energy"


def test_method_rows_scoring_f_of_x_are_new_rows_and_references_keep_their_keys():
    from bayesify.bench.jobs import job_config
    from bayesify.bench.posterior.command import PosteriorOptions
    from bayesify.bench.posterior.jobs import SCORES
    from bayesify.bench.runner import job_key

    hmc, methods = PosteriorOptions(preset="quick", datasets=("yacht",)).jobs()
    # a reference's key is what it was before f(x) was scored: old stores' references resume
    assert all(j.scores == 1 for j in hmc)
    assert all("scores" not in job_config(j) for j in hmc)
    # method rows that score f(x) and the floor are new rows, apart from the old ones
    assert all(j.scores == SCORES == 3 for j in methods)
    old = [replace(j, scores=1) for j in methods]
    assert not {job_key("posterior", j) for j in old} & {job_key("posterior", j) for j in methods}


def test_method_seeds_run_against_the_splits_one_reference_and_seed_0_keeps_its_key():
    from bayesify.bench.jobs import job_config
    from bayesify.bench.posterior.command import PosteriorOptions

    hmc, methods = PosteriorOptions(preset="quick", datasets=("yacht",)).jobs()
    runs = [(j.method, j.method_seed) for j in methods]
    assert len(runs) == len(set(runs)) and {s for _, s in runs} == {0, 1, 2}
    # every seed is scored against the split's one reference (seed 0), not the floor's run nor
    # the noise check's
    page = {j.reference_path() for j in hmc if not j.seed and j == page_reference(j)}
    assert {j.reference_path() for j in methods} == page and len(page) == 1
    assert "method_seed" not in job_config(next(j for j in methods if j.method_seed == 0))
    assert job_config(next(j for j in methods if j.method_seed == 2))["method_seed"] == 2
    _, one = PosteriorOptions(preset="quick", datasets=("yacht",), seeds=1).jobs()
    assert {j.method_seed for j in one} == {0}
    with pytest.raises(ValueError, match="seeds"):
        PosteriorOptions(preset="quick", seeds=-1)


def test_tables_show_mean_and_standard_error_over_runs_and_the_floor_as_its_mean():
    from scipy.stats import sem

    from bayesify.bench.posterior.floor_table import fx_table, predictive_table

    w2 = [0.30, 0.20, 0.25]
    floor = [0.22, 0.22, 0.22]
    agree = [0.9, 0.8, 1.0]
    rows = [{"method": "m", "split": 0, "metrics": {
        "w2_f": w, "floor_w2_f": f, "std_ratio_f_data": 1.0, "draws": 10,
        "agreement_data": a, "floor_agreement_data": 0.85, "ll": -1.0, "std_ratio_data": 1.0}}
        for w, f, a in zip(w2, floor, agree, strict=True)]  # fmt: skip
    fx = next(line for line in fx_table("p", rows, ["m"], gap=False) if line.startswith("| m |"))
    mean, se = sum(w2) / 3, float(sem(w2))
    assert fx.startswith(f"| m | 10 | {mean:.3f} ± {se:.3f} | 0.220 | 1/3 |")
    refs = [{"metrics": {"ll": -0.5, "accuracy": 1.0}}]
    table = predictive_table("p", refs, rows, ["m"], {})
    assert "agreement (data)" in table[2] and "TV" not in table[2]
    line = next(line for line in table if line.startswith("| m |"))
    assert line.startswith(f"| m | {0.9:.3f} ± {float(sem(agree)):.3f} | 0.850 | 2/3 |")
    # agreement that ties the floor's (both 1 where every input is easy) is within it
    from bayesify.bench.posterior.floor_table import within

    assert (
        within([{"a": 1.0, "floor_a": 1.0}, {"a": 0.9, "floor_a": 1.0}], "a", larger=True) == "1/2"
    )


def test_check_splits_limits_the_prior_and_noise_checks_and_nothing_else():
    from bayesify.bench.posterior.checks import NOISE, PRIOR, job_check_kind
    from bayesify.bench.posterior.command import PosteriorOptions
    from bayesify.bench.runner import job_key

    every = PosteriorOptions(preset="quick", datasets=("yacht", "fashion-pca"), splits=3)
    first = replace(every, check_splits=1)

    def checked(opts):
        hmc, _ = opts.jobs()
        kinds = {"yacht": NOISE, "fashion-pca": PRIOR}
        return sorted((j.dataset, j.split) for j in hmc if job_check_kind(j) == kinds[j.dataset])

    assert checked(every) == [*[("fashion-pca", k) for k in range(3)],
                              *[("yacht", k) for k in range(3) for _ in (0.5, 2.0)]]  # fmt: skip
    assert checked(first) == [("fashion-pca", 0), ("yacht", 0), ("yacht", 0)]
    # the references, floors and method rows are the same jobs (same keys: a store resumes)
    keys = [{job_key("posterior", j) for j in o.jobs()[0] if not job_check_kind(j)}
            | {job_key("posterior", j) for j in o.jobs()[1]} for o in (every, first)]  # fmt: skip
    assert keys[0] == keys[1]
    with pytest.raises(ValueError, match="check_splits"):
        PosteriorOptions(check_splits=-1)


def test_several_splits_take_the_standard_error_over_split_means():
    from scipy.stats import sem

    from bayesify.bench.posterior.floor_table import fx_table

    w2 = {0: [0.10, 0.12, 0.11], 1: [0.20, 0.19, 0.23]}  # seeds share a split's reference
    metrics = {"floor_w2_f": 0.05, "std_ratio_f_data": 1.0, "draws": 10}
    rows = [{"method": "m", "split": k, "metrics": {**metrics, "w2_f": w}}
            for k, ws in w2.items() for w in ws]  # fmt: skip
    line = next(x for x in fx_table("p", rows, ["m"], gap=False) if x.startswith("| m |"))
    means = [sum(v) / 3 for v in w2.values()]
    flat = [w for ws in w2.values() for w in ws]
    assert f"| {sum(means) / 2:.3f} ± {float(sem(means)):.3f} |" in line
    assert f"± {float(sem(flat)):.3f} |" not in line  # not over the six runs as if independent


def test_the_limitations_name_only_the_problems_the_page_has():
    from bayesify.bench.posterior.report import _limitations

    metrics = {"reference": True, "rhat_max": 1.0, "ess_min": 500.0, "ess_bulk_min": 500.0}
    refs = [{"dataset": d, "split": 0, "metrics": metrics} for d in ("toy-1d", "yacht")]
    rows = [{"dataset": d, "split": 0, "method": "m", "metrics": {}} for d in ("toy-1d", "yacht")]
    text = "\n".join(_limitations(refs, rows, prior=["toy-1d"], noise=2))
    assert "Toy-2d" not in text  # no toy-2d rows: nothing to say about its agreement
    assert "one other prior on toy-1d (not on UCI)" in text and "fashion-pca" not in text
    assert "the noise sensitivity section two other σ on UCI" in text  # factors 0.5 and 2
    text = "\n".join(_limitations(refs, rows, noise=1))
    assert "The noise sensitivity section checks one other σ on UCI; the prior" in text
    both = [*refs, {"dataset": "toy-2d", "split": 0, "metrics": metrics}]
    text = "\n".join(_limitations(both, rows, prior=["toy-1d", "fashion-pca", "toy-2d"]))
    assert "- **Toy-2d agreement.** " in text and "not reported apart" in text
    assert "one other prior on the toys and fashion-pca; neither" in text


def test_fashion_pca_is_three_classes_on_uncorrelated_components_with_digits_as_the_gap():
    from bayesify.bench.posterior.command import PosteriorOptions
    from bayesify.bench.posterior.problems import load_problem
    from bayesify.options import Task

    p = load_problem("fashion-pca", 0)
    assert p.task is Task.CLASSIFICATION and p.n_outputs == 3 and p.n_features == 5
    assert (len(p.y_train), len(p.y_val), int(p.in_data.sum()), int(p.gap.sum())) == (
        300, 200, 300, 300)  # fmt: skip
    assert set(p.y_train.tolist()) == set(p.y_test[p.in_data].tolist()) == {0, 1, 2}
    assert not (p.in_data & p.gap).any() and p.gap[300:].all()
    # principal components of the training rows, standardised: zero mean, unit variance and
    # uncorrelated on those rows (the correlation matrix of their projections is the identity)
    x = p.x_train.double()
    assert torch.allclose(x.mean(0), torch.zeros(5, dtype=torch.float64), atol=1e-5)
    assert torch.allclose(torch.corrcoef(x.T), torch.eye(5, dtype=torch.float64), atol=1e-4)
    assert torch.allclose(x.std(0), torch.ones(5, dtype=torch.float64), atol=1e-4)
    # a split is a data draw: reproducible, and another split draws other images
    assert torch.equal(load_problem("fashion-pca", 0).x_test, p.x_test)
    assert not torch.equal(load_problem("fashion-pca", 1).x_train, p.x_train)
    hmc, methods = PosteriorOptions(preset="quick", datasets=("fashion-pca",)).jobs()
    # the page's reference, the floor's, and one under the prior check's prior std
    assert len(hmc) == 3 and {j.epochs for j in methods} == {200}
    assert sorted(j.prior_std for j in hmc)[-1] == 1.0


def test_the_prior_check_scores_another_priors_reference_against_the_pages(tmp_path):
    from bayesify.bench.posterior.command import PosteriorOptions, run
    from bayesify.bench.posterior.jobs import _net
    from bayesify.bench.posterior.problems import load_problem
    from bayesify.reference import HMCSamples

    opts = PosteriorOptions(preset="tiny", datasets=("toy-2d",), methods=("mc-dropout",),
                            prior_check=1.0, store=str(tmp_path / "r.db"),
                            references=str(tmp_path / "refs"),
                            page=str(tmp_path / "p.md"))  # fmt: skip
    hmc, _ = opts.jobs()
    assert sorted(j.prior_std for j in hmc)[-1] == 1.0 and len(hmc) == 3
    threads = torch.get_num_threads()
    try:
        page = run(opts)
    finally:
        torch.set_num_threads(threads)
    assert page == (tmp_path / "p.md").read_text()
    section = page[page.index("## Prior sensitivity") :]
    row = next(line for line in section.splitlines() if line.startswith("| toy-2d | 0 | 1 |"))
    w2 = float(row.split(" | ")[3])
    # independently: both references have the same number of draws (2 chains × 10), so the
    # subsample keeps them all, and W2 per input and class is the sorted-sample formula
    problem = load_problem("toy-2d", 0)
    net = _net(problem)
    refs = {p.name.endswith("prior1"): HMCSamples.load(p) for p in (tmp_path / "refs").iterdir()
            if "seed0" in p.name}  # fmt: skip
    a, b = (refs[k].outputs(net, problem.x_test).softmax(-1).flatten(0, 1) for k in (True, False))
    per = (a.sort(0).values - b.sort(0).values).square().mean(0).sqrt()  # [N, K]
    assert w2 == pytest.approx(float(per.mean()), abs=6e-4) and w2 > 0
    assert "## Prior sensitivity" in page and "the prior sensitivity section" in page.lower()

    # --export: the rows travel as a file; a fresh store imported from it runs nothing and
    # writes the same page
    export = tmp_path / "rows.jsonl.gz"
    try:
        run(replace(opts, export=str(export)))
        again = run(replace(opts, export=str(export), store=str(tmp_path / "fresh.db")))
    finally:
        torch.set_num_threads(threads)
    assert len(gzip.decompress(export.read_bytes()).splitlines()) == 4  # 3 references, 1 method
    assert (
        "references: 0 finished, 3 skipped" in again and "methods: 0 finished, 1 skipped" in again
    )
    assert "Machine of this call, which ran no job" in again and "which ran no job" not in page
    body = again.index("\n## ")  # below the command and this call's counts and times
    assert again[body:] == page[page.index("\n## ") :]
