"""Teye et al.'s Table 1 protocol in `bayesify bench uci`: presets, CV search, t-test, report."""

from __future__ import annotations

import math

import pytest
import scipy.stats as st
import torch

from bayesify.bench.summary import significance
from bayesify.bench.uci.teye import PAPER_WEIGHT_DECAYS, UCISettings
from bayesify.bench.uci.teye_cv import (
    TrainSpec,
    cross_validate,
    decay_groups,
    load_weights,
    make_folds,
    mc_samples,
    teye_weight_decay,
)
from bayesify.bench.uci.teye_report import render_markdown
from bayesify.methods import MCBN
from bayesify.models import teye_regression_net


def test_paper_preset_is_the_papers_grid():
    s = UCISettings.from_preset("paper")
    assert s.batch_sizes == (32, 64, 128, 256, 512, 1024)
    assert s.batch_sizes_for("energy") == (32, 64, 128, 256, 512)  # capped as in their code
    assert PAPER_WEIGHT_DECAYS[0] == pytest.approx(0.1) and len(PAPER_WEIGHT_DECAYS) == 15
    assert PAPER_WEIGHT_DECAYS[-1] == pytest.approx(1e-15)
    assert (s.cv_folds, s.check_every, s.patience, s.epochs) == (5, 20, 10, 2000)
    assert (s.samples, s.bank_size, s.test_seeds, s.refit, s.mc_dropout) == (
        500,
        500,
        5,
        True,
        True,
    )
    assert s.dropout_rates == (0.2, 0.1, 0.05, 0.01, 0.005, 0.001)
    assert not s.decay_all and s.noise_protocol == "teye"
    quick = UCISettings.from_preset("quick")
    assert quick == UCISettings() and quick.cv_folds == 0 and quick.test_seeds == 1
    with pytest.raises(ValueError, match="unknown preset"):
        UCISettings.from_preset("fast")
    with pytest.raises(ValueError, match="unknown UCI setting"):
        UCISettings.from_preset("paper", folds=3)


def test_significance_is_scipys_one_sided_one_sample_t_test():
    # hand case: mean 2, sd 1, n 3 -> t = 2√3, df 2
    p, stars = significance([1.0, 2.0, 3.0])
    assert p == pytest.approx(st.t.sf(2 * math.sqrt(3), 2))
    assert stars == "*"
    assert significance([5.0, 5.1, 4.9, 5.05, 4.95])[1] == "****"
    assert significance([-1.0, -2.0, -3.0])[1] == "ns"
    assert significance([1.0])[1] == "n/a"


def test_folds_partition_the_rows():
    x, y = torch.arange(23.0).reshape(-1, 1), torch.arange(23.0)
    folds = make_folds(x, y, 5, seed=1)
    vals = torch.cat([f.y_val for f in folds]).sort().values
    assert torch.equal(vals, y)
    for f in folds:
        assert len(f.y_train) + len(f.y_val) == 23
        assert not set(f.y_train.tolist()) & set(f.y_val.tolist())
    with pytest.raises(ValueError, match="folds"):
        make_folds(x, y, 1)


def test_weight_decay_reaches_only_weight_matrices():
    net = teye_regression_net(3)
    groups = decay_groups(net, 0.5, decay_all=False)
    decayed = {id(p) for p in groups[0]["params"]}
    linear_weights = {id(m.weight) for m in net if isinstance(m, torch.nn.Linear)}
    assert decayed == linear_weights and groups[0]["weight_decay"] == 0.5
    for m in net:
        if isinstance(m, torch.nn.BatchNorm1d):
            assert id(m.weight) not in decayed and id(m.bias) not in decayed
    assert id(net[-1].bias) in {id(p) for p in groups[1]["params"]}
    assert groups[1]["weight_decay"] == 0.0
    assert len(decay_groups(net, 0.5, decay_all=True)) == 1
    assert teye_weight_decay(1e-3) == pytest.approx(2e-3)


def _toy(n=160, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = x[:, 0] - 0.5 * x[:, 1] + 0.1 * torch.randn(n, generator=g)
    return x, y


def test_cross_validation_stops_early_and_reports_its_best_check():
    x, y = _toy()
    folds = make_folds(x, y, 3, seed=0)
    build = lambda: MCBN(teye_regression_net(3, hidden=8), bank_size=4)  # noqa: E731
    spec = TrainSpec(batch_size=16, lr=1e-2)
    res = cross_validate(
        build, folds, spec, max_epochs=40, check_every=4, patience=2, samples=0, seed=0
    )
    assert res.epochs % 4 == 0 and 0 < res.epochs <= 40
    assert len(res.checks) <= 10 and min(res.checks) == pytest.approx(res.rmse)
    if len(res.checks) < 10:  # stopped early: the last `patience` checks did not improve
        assert all(c > res.rmse for c in res.checks[-2:])
    # the saved states reproduce the reported mean RMSE
    rmses = []
    for f, state in zip(folds, res.states, strict=True):
        m = build()
        load_weights(m.net, state)
        mean = mc_samples(m, f.x_val, 0, 0).mean(0)
        rmses.append(float(((mean - f.y_val) ** 2).mean().sqrt()))
    assert sum(rmses) / 3 == pytest.approx(res.rmse, rel=1e-5)


def test_report_states_the_protocol_and_stars():
    rows = [
        {"dataset": "yacht", "split": s, "method": m, "rmse": 1.0, "pll": -1.0, "crps": 0.5,
         "pll_norm": v + s, "crps_norm": v - s}
        for s in range(3) for m, v in (("MCBN", 10.0), ("CUBN", 0.0))
    ]  # fmt: skip
    text = render_markdown(rows, ["yacht"], 3, UCISettings())
    assert "τ protocol **teye**" in text and "Preset: **quick**" in text
    assert "| yacht | 9.00 ** | -56.39 *** | 11.00 ** | 45.58 **** |" in text
    other = render_markdown(rows, ["yacht"], 3, UCISettings(noise_protocol="bayesify"))
    assert "τ protocol **bayesify**" in other


def test_report_marks_a_tau_on_the_lower_bound():
    rows = [
        {"dataset": "yacht", "split": 0, "method": "MCBN", "rmse": 1.0, "pll": -1.0,
         "crps": 0.5, "pll_norm": 1.0, "crps_norm": 1.0, "noise_var": 0.01, "constant_var": 0.2},
        {"dataset": "yacht", "split": 0, "method": "CUBN", "rmse": 1.0, "pll": -1.0,
         "crps": 0.5, "pll_norm": 0.0, "crps_norm": 0.0},
    ]  # fmt: skip
    text = render_markdown(rows, ["yacht"], 1, UCISettings())
    assert "| yacht | MCBN | 0.01 † | 0.2 |" in text  # yacht: τ_max = 100
    rows[0]["noise_var"] = 0.05
    assert "| yacht | MCBN | 0.05 | 0.2 |" in render_markdown(rows, ["yacht"], 1, UCISettings())
