"""Adaptive sampling: figures equal a fixed-T prediction with the same draws, the stopping rule
holds row by row, and fewer samples are used than T_max where the tolerance allows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bayesify.methods import MCDropout
from bayesify.methods.core.adaptive import AdaptivePredictive
from bayesify.models import mlp
from bayesify.predictive import Predictive


def _method(task: str = "classification", out: int = 3) -> MCDropout:
    torch.manual_seed(0)
    m = MCDropout(mlp(4, out, (32,), norm=None, dropout=0.3), task=task)
    if task == "regression":
        m.noise_variance = 0.25
    return m


def _x(n: int = 60) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    # rows far from the origin have larger logits, so their dropout samples disagree more
    return torch.randn(n, 4, generator=g) * torch.linspace(0.05, 6, n)[:, None]


def test_loose_tolerance_is_the_fixed_t0_prediction():
    m, x = _method(), _x()
    pred = m.predict(x, "adaptive", tol=10.0, start=8, max_samples=32, seed=3)
    fixed = m.predict(x, 8, seed=3)
    assert isinstance(pred, AdaptivePredictive) and pred.samples.shape[0] == 32
    assert torch.equal(pred.samples_used, torch.full((60,), 8))
    torch.testing.assert_close(pred.mean, fixed.mean)
    torch.testing.assert_close(pred.mutual_information, fixed.mutual_information)
    torch.testing.assert_close(pred.entropy, fixed.entropy)


def test_zero_tolerance_draws_every_round_from_one_generator():
    m, x = _method(), _x(20)
    pred = m.predict(x, "adaptive", tol=0.0, start=4, max_samples=16, seed=5)
    assert torch.equal(pred.samples_used, torch.full((20,), 16))
    g = torch.Generator().manual_seed(5)
    rounds = [m.sample(x, 4, generator=g), m.sample(x, 4, generator=g), m.sample(x, 8, generator=g)]
    torch.testing.assert_close(pred.samples, torch.softmax(torch.cat(rounds), -1))


def _se(samples: np.ndarray) -> np.ndarray:
    """Largest-over-classes standard error of the mean, computed with numpy (ddof=1)."""
    return (samples.std(0, ddof=1) / np.sqrt(len(samples))).reshape(samples.shape[1], -1).max(-1)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_each_row_is_its_own_fixed_t_prediction_and_the_stopping_rule_holds(task):
    m, x = _method(task, 3 if task == "classification" else 1), _x()
    tol = 0.03 if task == "classification" else 0.15
    pred = m.predict(x, "adaptive", tol=tol, start=4, max_samples=32, seed=7)
    used = pred.samples_used
    assert set(used.tolist()) <= {4, 8, 16, 32} and len(set(used.tolist())) > 1
    assert used.double().mean() < 32
    s = pred.samples
    for i in range(len(x)):
        t_r = int(used[i])
        own = s[:t_r, i : i + 1]  # the row's distinct draws
        row = (Predictive.classification(own) if task == "classification"
               else Predictive.regression(own, 0.25))  # fmt: skip
        torch.testing.assert_close(pred[i : i + 1].mean, row.mean)
        torch.testing.assert_close(pred[i : i + 1].epistemic_variance, row.epistemic_variance)
        if task == "classification":
            torch.testing.assert_close(pred[i : i + 1].mutual_information, row.mutual_information)
        else:
            torch.testing.assert_close(pred[i : i + 1].std, row.std)
        own_np = own.numpy().astype(np.float64)
        if t_r < 32:
            assert _se(own_np)[0] <= tol + 1e-6
        if t_r > 4:
            assert _se(own_np[: t_r // 2])[0] > tol - 1e-6


def test_fixed_t_that_reaches_the_tolerance_everywhere_needs_more_samples():
    m, x = _method(), _x()
    pred = m.predict(x, "adaptive", tol=0.03, start=4, max_samples=64, seed=2)
    worst = int(pred.samples_used.max())
    assert pred.samples_used.double().mean() < worst


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs tol"),
        ({"tol": -1}, "tol must be"),
        ({"tol": float("nan")}, "tol must be"),
        ({"tol": 0.1, "start": 1}, "start must be"),
        ({"tol": 0.1, "start": 8, "max_samples": 24}, "power of two"),
        ({"tol": 0.1, "start": 8, "max_samples": 4}, "power of two"),
    ],
)
def test_bad_adaptive_options(options, message):
    with pytest.raises(ValueError, match=message):
        _method().predict(_x(5), "adaptive", **options)


def test_adaptive_options_need_adaptive_samples():
    with pytest.raises(ValueError, match='go with samples="adaptive"'):
        _method().predict(_x(5), 8, tol=0.1)


def _scaled(loc: float, scale: float) -> MCDropout:
    """The same regression network behind a bundle preprocessing whose target is
    ``loc + scale * network output`` (as a bundle trained on standardised targets)."""
    from bayesify.data.preprocessing import Preprocessing

    m = _method("regression", 1)
    m.preprocessing = Preprocessing(input_shape=[4], y_mean=loc, y_std=scale)
    return m


def test_tol_is_read_in_the_target_units_the_predictive_reports():
    x = _x()
    unit = _scaled(0.0, 1.0).predict(x, "adaptive", tol=0.15, start=4, max_samples=32, seed=7)
    milli = _scaled(5.0, 1000.0)
    big = milli.predict(x, "adaptive", tol=150.0, start=4, max_samples=32, seed=7)
    assert len(set(unit.samples_used.tolist())) > 1  # the tolerance matters row by row
    # ×1000 target with ×1000 tolerance: the same draws, rows and figures ×1000
    assert torch.equal(big.samples_used, unit.samples_used)
    torch.testing.assert_close(big.mean, 5.0 + 1000.0 * unit.mean)
    torch.testing.assert_close(big.std, 1000.0 * unit.std)
    # the stopping rule holds in the reported units (numpy, float64)
    s = big.samples.numpy().astype(np.float64)
    for i, t_r in enumerate(big.samples_used.tolist()):
        if t_r < 32:
            assert _se(s[:t_r, i : i + 1])[0] <= 150.0 + 1e-6
    # the unscaled tolerance is 1000 times tighter in these units: every row runs to the end
    tight = milli.predict(x, "adaptive", tol=0.15, start=4, max_samples=32, seed=7)
    assert torch.equal(tight.samples_used, torch.full((len(x),), 32))


def test_heteroscedastic_regression_stops_on_the_sample_means():
    torch.manual_seed(0)
    m = MCDropout(mlp(4, 2, (32,), norm=None, dropout=0.3), task="regression",
                  likelihood="heteroscedastic")  # fmt: skip
    x = _x()
    pred = m.predict(x, "adaptive", tol=0.05, start=4, max_samples=32, seed=1)
    assert pred.samples_used.shape == (len(x),) and pred.samples.shape == (32, len(x))
    assert len(set(pred.samples_used.tolist())) > 1
    s = pred.samples.numpy().astype(np.float64)
    for i, t_r in enumerate(pred.samples_used.tolist()):
        own = s[:t_r, i : i + 1]
        if t_r < 32:
            assert _se(own)[0] <= 0.05 + 1e-6
        if t_r > 4:
            assert _se(own[: t_r // 2])[0] > 0.05 - 1e-6


def test_a_mixture_doubles_what_it_draws_so_its_members_weigh_the_same():
    """An ensemble of 3 MC dropout members rounds 4 up to 6: the rounds draw 6, 6 and 12 (2, 2
    and 4 per member)."""
    from bayesify.methods import DeepEnsemble

    torch.manual_seed(0)
    m = DeepEnsemble(mlp(4, 3, (16,), norm=None, dropout=0.3), members=3, method=MCDropout,
                     task="classification")  # fmt: skip
    x = _x(20)
    pred = m.predict(x, "adaptive", tol=0.0, start=4, max_samples=16, seed=5)
    assert pred.samples.shape[0] == 24
    assert torch.equal(pred.samples_used, torch.full((20,), 24))
    g = torch.Generator().manual_seed(5)
    rounds = [m.sample(x, t, generator=g) for t in (6, 6, 12)]
    torch.testing.assert_close(pred.samples, torch.softmax(torch.cat(rounds), -1))
    loose = m.predict(x, "adaptive", tol=10.0, start=4, max_samples=16, seed=5)
    torch.testing.assert_close(loose.mean, m.predict(x, 6, seed=5).mean)
    assert torch.equal(loose.samples_used, torch.full((20,), 6))


@pytest.mark.parametrize("kind", ["deep-ensemble", "batch-ensemble"])
def test_members_that_do_not_sample_stop_once_each_has_run(kind):
    """M = 3 plain members: the first round holds every member, so even at tol = 0 no row
    draws more and nothing is tiled; the mixture is the members' exact one and each row used
    M."""
    from bayesify.methods import BatchEnsemble, DeepEnsemble

    torch.manual_seed(0)
    cls = DeepEnsemble if kind == "deep-ensemble" else BatchEnsemble
    m = cls(mlp(4, 3, (16,), norm=None), members=3, task="classification")
    assert m.distinct_samples() == 3
    x = _x(20)
    pred = m.predict(x, "adaptive", tol=0.0, start=4, max_samples=16, seed=5)
    assert torch.equal(pred.samples_used, torch.full((20,), 3)) and pred.num_samples == 3
    members = m.predict(x, 3, seed=5)
    torch.testing.assert_close(pred.mean, members.mean)
    torch.testing.assert_close(pred.mutual_information, members.mutual_information)
    assert pred.mutual_information.max() > 0  # the members differ: a real mixture


def test_members_that_sample_have_no_end_to_their_draws():
    from bayesify.methods import DeepEnsemble

    m = DeepEnsemble(mlp(4, 3, (16,), norm=None, dropout=0.3), members=3, method=MCDropout,
                     task="classification")  # fmt: skip
    assert m.distinct_samples() is None and _method().distinct_samples() is None


@pytest.mark.parametrize("wrap", ["dataset", "loader", "array"])
def test_a_dataset_loader_or_array_gives_the_tensors_adaptive_prediction(wrap):
    from torch.utils.data import DataLoader, TensorDataset

    m, x = _method(), _x()
    y = torch.zeros(len(x), dtype=torch.long)
    given = {"dataset": TensorDataset(x, y),
             "loader": DataLoader(TensorDataset(x, y), batch_size=7, shuffle=True),  # order kept
             "array": x.numpy()}[wrap]  # fmt: skip
    pred = m.predict(given, "adaptive", tol=0.02, start=4, max_samples=16, seed=5)
    same = m.predict(x, "adaptive", tol=0.02, start=4, max_samples=16, seed=5)
    assert torch.equal(pred.samples_used, same.samples_used)
    assert len(pred.samples_used.unique()) > 1  # the tolerance splits the rows
    torch.testing.assert_close(pred.mean, same.mean)
