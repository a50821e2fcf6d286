"""The posterior page's noise check (``--noise-check``): one more UCI reference with σ fixed at a
factor of the page's, its own bundle and row key (the page's references keep theirs), scored
against the page's reference by the same distances as the floor. The references here are made
by hand: what is under test is the job and the scoring, not NUTS (the prior check's test runs
it)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from bayesify.bench.jobs import job_config, job_key
from bayesify.bench.posterior.checks import (
    NOISE,
    PRIOR,
    check_kind,
    job_check_kind,
    noise_section,
    page_reference,
)
from bayesify.bench.posterior.command import EXPERIMENT, PosteriorOptions
from bayesify.data import DataError, data_root


def _opts(tmp_path, datasets=("yacht",), **kw) -> PosteriorOptions:
    return PosteriorOptions(preset="tiny", datasets=datasets, methods=("mc-dropout",),
                            store=str(tmp_path / "r.db"), references=str(tmp_path / "refs"),
                            page=str(tmp_path / "p.md"), **kw)  # fmt: skip


def test_the_noise_check_is_one_more_uci_reference_with_its_own_key(tmp_path):
    hmc, _ = _opts(tmp_path).jobs()
    assert len(hmc) == 2  # the tiny preset has no check
    hmc, _ = _opts(tmp_path, noise_check=(0.5,)).jobs()
    (check,) = [j for j in hmc if j.noise_scale != 1.0]
    page = page_reference(check)
    assert check.noise_scale == 0.5 and page in hmc and len(hmc) == 3
    both, _ = _opts(tmp_path, noise_check=(0.5, 2.0)).jobs()
    assert sorted(j.noise_scale for j in both) == [0.5, 1.0, 1.0, 2.0]
    assert {page_reference(j) for j in both} == {page, replace(page, seed=1)}
    none, _ = _opts(tmp_path, noise_check=(0.0,)).jobs()
    assert len(none) == 2
    quick, _ = PosteriorOptions(preset="quick", datasets=("yacht",)).jobs()
    assert sorted(j.noise_scale for j in quick) == [0.5, 1.0, 1.0, 2.0]
    # the page's references keep the key they had before the check existed
    assert "noise_scale" not in job_config(page) and job_config(check)["noise_scale"] == 0.5
    assert job_key(EXPERIMENT, check) != job_key(EXPERIMENT, page)
    assert check.reference_path() != page.reference_path()
    assert check_kind("hmc", job_config(check)) == NOISE == job_check_kind(check)
    assert check_kind("hmc", job_config(page)) is None is job_check_kind(page)
    assert check_kind("hmc", {"prior_std": 1.0}) == PRIOR
    assert check_kind("mc-dropout", job_config(check)) is None
    # toys and fashion-pca fix no σ from validation rows: no noise check there
    toys = _opts(tmp_path, datasets=("toy-1d", "toy-2d"), noise_check=(0.5,))
    assert all(j.noise_scale == 1.0 for j in toys.jobs()[0])
    for bad in ((-2.0,), (1.0,)):
        with pytest.raises(ValueError, match="noise_check"):
            _opts(tmp_path, noise_check=bad)


def test_the_noise_sections_w2_is_the_sorted_sample_distance_to_the_pages_reference(tmp_path):
    try:
        data_root()
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")
    from bayesify.bench.posterior.jobs import FLOOR_SEED, _net
    from bayesify.bench.posterior.problems import load_problem
    from bayesify.options import Task
    from bayesify.reference import HMCConfig, HMCSamples

    hmc, _ = _opts(tmp_path, noise_check=(0.5,)).jobs()
    (check,) = [j for j in hmc if j.noise_scale != 1.0]
    page = page_reference(check)
    floor = replace(page, seed=FLOOR_SEED)
    problem = load_problem("yacht", 0)
    net = _net(problem)
    shapes = [(n, tuple(p.shape)) for n, p in net.named_parameters()]
    n_weights = sum(p.numel() for p in net.parameters())
    g = torch.Generator().manual_seed(0)
    draws = {}
    for job, spread, sigma in ((page, 0.3, 0.6), (floor, 0.3, 0.6),
                               (check, 0.15, 0.3)):  # fmt: skip
        theta = spread * torch.randn(2, 10, n_weights, generator=g)
        log_noise = torch.full((2, 10), math.log(sigma))
        draws[job] = HMCSamples(theta, log_noise, shapes, Task.REGRESSION, HMCConfig())
        draws[job].save(job.reference_path())
    metrics = {"ll": -1.25, "noise_std": 0.3, "rhat_max": 1.002}
    rows = [{"experiment": EXPERIMENT, "method": "hmc", "dataset": "yacht", "split": 0,
             "seed": 0, "config_hash": job_key(EXPERIMENT, check).config_hash,
             "config": job_config(check), "metrics": metrics}]  # fmt: skip
    refs = [{"dataset": "yacht", "split": 0, "seed": 0, "metrics": {"ll": -1.5}}]
    lines = noise_section(EXPERIMENT, hmc, rows, refs)
    assert lines[0] == "## Noise sensitivity"
    (row,) = [line for line in lines if line.startswith("| yacht | 0 | 0.5 |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:5] == ["0.300", "0.600"]  # σ fixed, and the page's: σ / factor
    assert cells[-3:] == ["-1.250", "-1.500", "1.002"]
    # independently: 20 draws each (below the subsample's 100: all kept), W2 per input the
    # sorted-sample formula on f(x), averaged over the test inputs
    x = problem.x_test

    def fx(job) -> torch.Tensor:
        return draws[job].outputs(net, x)[..., 0].flatten(0, 1)  # [20, N]

    for cell, other in ((cells[5], check), (cells[6], floor)):
        a, b = fx(other).sort(0).values, fx(page).sort(0).values
        assert float(cell) == pytest.approx(float((a - b).square().mean(0).sqrt().mean()),
                                            abs=6e-4)  # fmt: skip
    assert float(cells[5]) > float(cells[6])  # the narrower draws are farther than the floor's
