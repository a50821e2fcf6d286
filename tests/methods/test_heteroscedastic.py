"""Heteroscedastic regression: a mean and a variance output per row, the Gaussian NLL, and each
Monte Carlo sample's own variance in the predictive."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import bayesify
from bayesify.methods import get_method
from bayesify.methods.core.likelihood import VARIANCE_FLOOR, gaussian_nll, split_heteroscedastic
from bayesify.models import mlp

METHOD_OPTIONS = {
    "deterministic": {},
    "mc-dropout": {"p": 0.1},
    "mcbn": {"bank_size": 16},
    "bbb": {},
    "ibnn": {"components": 2},
    "stochastic-norm": {},
    "ensemble": {"members": 2, "method": bayesify.MCDropout, "method_options": {"p": 0.1}},
}


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: on a shared 2-core machine two threads per test spin against each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def true_std(x: torch.Tensor) -> torch.Tensor:
    return 0.05 + 0.3 * x.abs()


def toy(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """y = sin(x) + ε·(0.05 + 0.3|x|), x ~ U(-3, 3): the noise grows with |x|."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=g) * 6 - 3
    y = torch.sin(x[:, 0]) + torch.randn(n, generator=g) * true_std(x[:, 0])
    return x, y


def test_nll_equals_torch_normal_log_prob():
    g = torch.Generator().manual_seed(0)
    out = torch.randn(7, 2, generator=g) * 2
    y = torch.randn(7, generator=g)
    mean, var = split_heteroscedastic(out)
    torch.testing.assert_close(mean, out[:, 0])
    torch.testing.assert_close(var, F.softplus(out[:, 1]) + VARIANCE_FLOOR)
    ref = -torch.distributions.Normal(out[:, 0], var.sqrt()).log_prob(y).mean()
    torch.testing.assert_close(gaussian_nll(mean, var, y), ref)
    torch.testing.assert_close(gaussian_nll(mean, var, y[:, None]), ref)
    method = bayesify.MCDropout(
        mlp(1, 2, (4,), norm=None, dropout=0.1), likelihood="heteroscedastic"
    )
    torch.testing.assert_close(method.nll(out, y), ref)


def test_predictive_uses_each_samples_variance():
    method = bayesify.Deterministic(mlp(1, 2, (4,), norm=None), likelihood="heteroscedastic")
    out = torch.tensor([[[0.0, 0.0], [1.0, 2.0]], [[2.0, -1.0], [3.0, 1.0]]])  # [T=2, N=2, 2]
    pred = method.to_predictive(out)
    var = F.softplus(out[..., 1]) + VARIANCE_FLOOR  # [T, N]
    torch.testing.assert_close(pred.samples, out[..., 0])
    torch.testing.assert_close(pred.aleatoric_variance, var.mean(0))
    # mixture log density, by hand
    y = torch.tensor([0.5, 2.0])
    comp = torch.distributions.Normal(out[..., 0], var.sqrt()).log_prob(y)  # [T, N]
    ref = torch.logsumexp(comp, 0) - math.log(2)
    torch.testing.assert_close(pred.log_prob(y), ref)


def test_bad_options_and_outputs_are_clear_errors():
    with pytest.raises(ValueError, match="unknown likelihood 'hetero'"):
        bayesify.MCDropout(mlp(1, 2, norm=None, dropout=0.1), likelihood="hetero")
    with pytest.raises(ValueError, match="regression option"):
        bayesify.Deterministic(mlp(1, 3), task="classification", likelihood="heteroscedastic")
    method = bayesify.Deterministic(mlp(1, 1, (4,), norm=None), likelihood="heteroscedastic")
    with pytest.raises(ValueError, match=r"must output \[N, 2\]"):
        method.fit((torch.randn(8, 1), torch.randn(8)), epochs=1, progress=False)


@pytest.mark.parametrize("name", sorted(METHOD_OPTIONS))
def test_every_method_trains_predicts_and_round_trips(name, tmp_path):
    x, y = toy(96, seed=1)
    xv, yv = toy(32, seed=2)
    torch.manual_seed(0)
    norm = "batch" if name == "mcbn" else None
    net = mlp(1, 2, (16,), norm=norm, dropout=0.1 if name in ("mc-dropout", "ensemble") else 0.0)
    method = get_method(name)(net, likelihood="heteroscedastic", **METHOD_OPTIONS[name])
    method.fit((x, y), val=(xv, yv), epochs=2, batch_size=16, progress=False)
    assert method.constant_variance is not None and method.constant_variance > 0
    grid = torch.linspace(-3, 3, 9)[:, None]
    with warnings_as_errors():  # no "τ⁻¹ never fitted" warning: the noise is learned
        pred = method.predict(grid, samples=4, seed=0)
    assert pred.samples.shape == (4, 9)
    assert pred.noise_variance.shape == (4, 9)
    assert pred.aleatoric_variance.std() > 0  # varies with the input
    method.save(tmp_path / name)
    loaded = bayesify.load(tmp_path / name)
    assert loaded.config.heteroscedastic
    again = loaded.predict(grid, samples=4, seed=0)
    torch.testing.assert_close(again.samples, pred.samples)
    torch.testing.assert_close(again.noise_variance, pred.noise_variance)


class warnings_as_errors:
    def __enter__(self):
        import warnings

        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


def _learned_vs_true_std(method: bayesify.Method) -> tuple[float, float]:
    x, y = toy(600, seed=3)
    xv, yv = toy(200, seed=4)
    method.fit((x, y), val=(xv, yv), epochs=60, batch_size=64, lr=3e-3, progress=False)
    grid = torch.linspace(-2.8, 2.8, 57)[:, None]
    pred = method.predict(grid, samples=50, seed=0)
    learned = pred.aleatoric_variance.sqrt()
    truth = true_std(grid[:, 0])
    corr = torch.corrcoef(torch.stack([learned, truth]))[0, 1].item()
    return corr, (learned.mean() / truth.mean()).item()


@pytest.mark.slow
def test_mc_dropout_learns_the_noise_that_grows_with_x():
    torch.manual_seed(0)
    # a small rate: the variance head also absorbs the mean's dropout jitter, which inflates the
    # learned noise where the true one is near 0 (x = 0: 0.5 instead of 0.05 at p = 0.05)
    net = mlp(1, 2, (64, 64), norm=None, dropout=0.02)
    corr, ratio = _learned_vs_true_std(bayesify.MCDropout(net, likelihood="heteroscedastic"))
    assert corr > 0.9
    assert 0.8 < ratio < 1.25


@pytest.mark.slow
def test_deep_ensemble_learns_the_noise_that_grows_with_x():
    torch.manual_seed(0)
    net = mlp(1, 2, (64, 64), norm=None)
    method = bayesify.DeepEnsemble(net, members=3, likelihood="heteroscedastic")
    corr, ratio = _learned_vs_true_std(method)
    assert corr > 0.9
    assert 0.8 < ratio < 1.25


def test_cli_trains_and_evaluates_a_heteroscedastic_bundle(tmp_path):
    from typer.testing import CliRunner

    from bayesify.cli import app
    from bayesify.data import DataError, data_root

    try:
        (data_root() / "uci" / "yacht").resolve(strict=True)
    except (DataError, FileNotFoundError) as e:
        pytest.skip(f"shared UCI data not found: {e}")
    out = tmp_path / "bundle"
    args = ["train", "--method", "mc-dropout", "--data", "yacht", "--epochs", "2", "--samples",
            "5", "--option", "likelihood=heteroscedastic", "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    loaded = bayesify.load(out)
    assert loaded.config.heteroscedastic and loaded.net[-1].out_features == 2
    assert CliRunner().invoke(app, ["evaluate", str(out), "--samples", "5"]).exit_code == 0
