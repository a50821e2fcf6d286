"""The flow posterior's evidence on a small version: on the banana-shaped posterior of
y = (w1 + w2²)·x + ε, a flow fitted by the ELBO is closer to the exact (grid) posterior than the
mean-field Gaussian fitted by the same code, by 2-Wasserstein distance and by KL(q ‖ p); and the
command's page is the mean ± standard error of its stored per-seed rows, resumed from the store
or its export without refitting."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
import torch

from bayesify.bench.machine import machine_label
from bayesify.bench.posterior import flow_banana
from bayesify.bench.posterior.flow_banana import FlowBananaOptions
from bayesify.bench.posterior.flow_banana_fits import (
    BananaJob,
    exact_draws,
    make_problem,
    score_banana_job,
    wasserstein2,
)
from bayesify.bench.store import ResultsStore
from bayesify.bench.store_io import read_rows

pytest.importorskip("zuko")


def test_wasserstein2_of_shifted_samples_is_the_shift():
    a = torch.randn(200, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert wasserstein2(a, a + torch.tensor([3.0, 4.0], dtype=torch.float64)) == pytest.approx(5.0)
    assert wasserstein2(a, a.flip(0)) == pytest.approx(0.0, abs=1e-6)


def test_exact_draws_follow_the_grid_posterior():
    """The grid's draws have the mean and spread of the grid density (a unimodal problem)."""
    problem = make_problem("banana", 20, 0.5, 0)
    w, lp, axes, _ = problem.grid(200)
    p = torch.softmax(lp, 0)
    mean = (p[:, None] * w).sum(0)
    draws = exact_draws(w, lp, axes, 20000, 1)
    torch.testing.assert_close(draws.mean(0), mean, atol=0.03, rtol=0)


def test_a_flow_beats_mean_field_on_the_banana():
    scores = {
        kind: score_banana_job(
            BananaJob(kind, "banana", 0, 0, steps=600, samples=16, lr=2e-2, draws=400, grid=150)
        )  # fmt: skip
        for kind in ("mean-field", "realnvp")
    }
    assert scores["realnvp"]["w2"] < scores["mean-field"]["w2"], scores
    assert scores["realnvp"]["kl"] < 0.3 * scores["mean-field"]["kl"]


def test_seed_alone_replaces_seeds():
    assert FlowBananaOptions(seed=3).seed_list() == (3,)
    assert FlowBananaOptions(seeds=(2, 0, 2)).seed_list() == (2, 0)


def _cell(values: list[float]) -> str:
    """mean ± sample std / √n, computed apart from the page's code."""
    se = statistics.stdev(values) / math.sqrt(len(values))
    return f"{statistics.mean(values):.3f} ± {se:.3f}"


def test_two_seeds_page_is_mean_and_se_of_stored_rows_and_reruns_skip(tmp_path: Path, monkeypatch):
    kinds = ("mean-field", "realnvp")
    opts = FlowBananaOptions(
        out=str(tmp_path), page=str(tmp_path / "page.md"), store=str(tmp_path / "r.db"),
        export=str(tmp_path / "r.jsonl"), problems=("banana",), kinds=kinds, steps=15,
        samples=4, draws=30, grid=30, seeds=(0, 1), uci=(),
    )  # fmt: skip
    text = flow_banana.run(opts)
    rows = read_rows(tmp_path / "r.jsonl")
    assert sorted((r["method"], r["seed"]) for r in rows) == [(k, s) for k in kinds for s in (0, 1)]
    for kind in kinds:
        m = [r["metrics"] for r in sorted(rows, key=lambda r: r["seed"]) if r["method"] == kind]
        assert m[0]["w2"] != m[1]["w2"]  # two seeds, two fits: a standard error above 0
        fit = statistics.mean(x["fit_seconds"] for x in m)
        w2, floor, kl = ([x[k] for x in m] for k in ("w2", "floor", "kl"))
        line = f"| banana | {kind} | 2 | {_cell(w2)} | {_cell(floor)} | {_cell(kl)} | {fit:.0f} |"
        assert line in text.splitlines(), (line, text)
    assert "2 seeds" in text and (tmp_path / "flow_posterior.png").is_file()

    def refit(job: BananaJob) -> dict:
        raise AssertionError(f"refitted {job}")

    monkeypatch.setattr(flow_banana, "score_banana_job", refit)
    with ResultsStore(opts.store) as db:
        before = [(r["method"], r["seed"], r["attempts"], r["created"]) for r in db.records()]
    # every fit skipped: the same page from the store, its machine line saying this call ran none
    assert "\nMachine: " in text and _as_if_ran(flow_banana.run(opts)) == text
    with ResultsStore(opts.store) as db:
        assert [(r["method"], r["seed"], r["attempts"], r["created"])
                for r in db.records()] == before  # fmt: skip
    Path(opts.store).unlink()  # a fresh checkout: the store rebuilt from the export alone
    assert _as_if_ran(flow_banana.run(opts)) == text


def _as_if_ran(page: str) -> str:
    """``page`` of a call that ran no job, with the machine line of one that did."""
    label = machine_label(False)
    assert f"\n{label}: " in page
    return page.replace(label, machine_label(True), 1)


def test_reading_counts_the_seeds_of_both_compared_cells():
    from bayesify.bench.posterior.flow_banana_page import Stat, reading

    def rows(w2s):
        return {s: {"w2": w, "kl": 0.1 + w} for s, w in enumerate(w2s)}

    groups = {("banana", "mean-field"): rows([0.5, 0.6, 0.55]), ("banana", "maf"): rows([0.2, 0.3])}
    floor = {"banana": Stat.of([0.01, 0.02, 0.015])}
    (text,) = reading(groups, floor, ["banana"])
    assert "3 and 2 seeds" in text and "closer to the exact posterior than" in text
    groups[("banana", "maf")] = rows([0.2, 0.3, 0.25])
    assert "; 3 seeds)" in reading(groups, floor, ["banana"])[0]
