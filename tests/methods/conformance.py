"""The suite every method passes (inherit :class:`MethodConformance`, define ``make``)."""

from __future__ import annotations

import copy
from unittest import mock

import pytest
import torch

import bayesify
from bayesify.methods import Method
from bayesify.predictive import Task


def regression_data(n: int = 256, d: int = 5, seed: int = 0):
    """``n`` rows of ``d`` normal features, y = sin(x₀) + x₁/2 + N(0, 0.1²): ``[n, d]``, ``[n]``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] + 0.1 * torch.randn(n, generator=g)
    return x, y


def fitted_regression(method_class, **options):
    """``method_class`` on an MLP 5-16-16-1 (no norm), fitted 3 epochs on the first 200 rows of
    :func:`regression_data` and validated on the other 56; with 30 of those rows to predict."""
    from bayesify.models import mlp

    x, y = regression_data()
    method = method_class(mlp(5, hidden=(16, 16), norm=None), **options)
    method.fit((x[:200], y[:200]), val=(x[200:], y[200:]), epochs=3, batch_size=16,
               progress=False)  # fmt: skip
    return method, x[200:230]


def fitted_lenet(method_class, rows: int = 64, predict: int = 10, **options):
    """``method_class`` on a LeNet with batch norm, fitted one epoch on ``rows`` random 28×28
    images of 10 classes; with the first ``predict`` images to predict."""
    from bayesify.models import lenet

    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (rows,), generator=g)
    method = method_class(lenet(norm="batch"), task="classification", **options)
    method.fit((x, y), epochs=1, batch_size=16, progress=False)
    return method, x[:predict]


#: per test class: (network handed to a method, its state_dict and train flags at that moment)
CALLERS: dict[type, list[tuple[torch.nn.Module, dict, list[bool]]]] = {}


def _spied_make(cls):
    """``cls().make()`` while recording every network a method is asked to wrap (not inplace)."""
    seen = []
    real = Method.__init__

    def spy(self, net, *args, inplace=False, **kwargs):
        if not inplace and isinstance(net, torch.nn.Module):
            state = copy.deepcopy(net.state_dict())
            seen.append((net, state, [m.training for m in net.modules()]))
        real(self, net, *args, inplace=inplace, **kwargs)

    with mock.patch.object(Method, "__init__", spy):
        case = cls().make()
    CALLERS[cls] = seen
    return case


def rows_per_forward(method, run) -> list[int]:
    """Rows every module of ``method.net`` sees per forward call while ``run()`` runs."""
    seen: list[int] = []

    def hook(_module, args) -> None:
        # (a parametrization's forward takes the weight, a Parameter, not rows)
        if (
            args
            and isinstance(args[0], torch.Tensor)
            and not isinstance(args[0], torch.nn.Parameter)
        ):
            seen.append(int(args[0].shape[0]))

    handles = [m.register_forward_pre_hook(hook) for m in method.net.modules()]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return seen


class MethodConformance:
    """Subclasses define ``make() -> (fitted method, inputs [N, ...])``.

    ``stochastic = False`` for methods whose samples are all equal (the deterministic net);
    ``atol`` bounds one-pass vs loop differences (float32 reduction order).
    """

    stochastic = True
    samples = 6
    atol = 1e-5

    def make(self):  # pragma: no cover - overridden
        raise NotImplementedError

    @pytest.fixture(scope="class")
    @classmethod
    def case(cls):
        torch.manual_seed(0)
        return _spied_make(cls)

    def test_callers_network_is_left_alone(self, case):
        """Wrapping, fitting and predicting change neither the keys and values of the network
        the caller handed in nor its train/eval flags (methods work on a copy)."""
        method, x = case
        method.predict(x, samples=2, seed=0)
        callers = CALLERS[type(self)]
        assert callers, "make() wrapped no network"
        for net, state, modes in callers:
            assert net is not method.net
            after = net.state_dict()
            assert list(after) == list(state)
            for k, v in state.items():
                torch.testing.assert_close(after[k], v, rtol=0, atol=0, msg=k)
            assert [m.training for m in net.modules()] == modes

    @pytest.mark.parametrize("training", [True, False])
    def test_predict_and_sample_restore_the_mode(self, case, training):
        method, x = case
        method.net.train(training)
        try:
            method.predict(x, samples=2, seed=0)
            assert all(m.training is training for m in method.net.modules())
            method.sample(x, 2, seed=0)
            assert all(m.training is training for m in method.net.modules())
        finally:
            method.net.eval()

    def test_shapes(self, case):
        method, x = case
        pred = method.predict(x, samples=self.samples, seed=0)
        assert isinstance(pred, bayesify.Predictive)
        t = method.sample_count(self.samples)  # T, or more for a mixture's equal weights
        assert self.samples <= t < 2 * self.samples and pred.num_samples == t
        if method.config.task is Task.REGRESSION:
            assert pred.samples.shape == (t, len(x))
            assert pred.mean.shape == pred.variance.shape == (len(x),)
        else:
            assert pred.samples.dim() == 3 and pred.samples.shape[:2] == (t, len(x))
            assert pred.mutual_information.shape == (len(x),)

    def test_same_generator_same_samples(self, case):
        method, x = case
        a = method.predict(x, samples=self.samples, generator=torch.Generator().manual_seed(3))
        b = method.predict(x, samples=self.samples, generator=torch.Generator().manual_seed(3))
        torch.testing.assert_close(a.samples, b.samples, rtol=0, atol=0)

    def test_samples_differ_and_survive_eval(self, case):
        method, x = case
        method.net.eval()
        pred = method.predict(x, samples=self.samples, seed=1)
        spread = pred.samples.std(0).max().item()
        if self.stochastic:
            assert spread > 1e-4, "samples are identical: the randomness is off"
        else:
            assert spread == 0.0

    def test_one_pass_equals_loop(self, case):
        method, x = case
        one = method.sample(x, self.samples, generator=torch.Generator().manual_seed(5))
        loop = method.reference_samples(x, self.samples, generator=torch.Generator().manual_seed(5))
        torch.testing.assert_close(one, loop, rtol=1e-5, atol=self.atol)

    def test_chunked_equals_single_pass(self, case):
        method, x = case
        whole = method.sample(x, self.samples, seed=2, max_rows=None)
        chunked = method.sample(x, self.samples, seed=2, max_rows=self.samples * 3)
        torch.testing.assert_close(whole, chunked, rtol=1e-5, atol=self.atol)

    def test_more_samples_than_max_rows_chunks_over_samples(self, case):
        """T alone above ``max_rows``: the same samples as one pass, and no forward call
        sees more than ``max_rows`` rows (the groups are split into ranges)."""
        method, x = case
        x, t, max_rows = x[:3], 40, 16
        whole = method.sample(x, t, seed=6, max_rows=None)
        out = {}
        seen = rows_per_forward(
            method, lambda: out.setdefault("s", method.sample(x, t, seed=6, max_rows=max_rows))
        )
        assert out["s"].shape == whole.shape and whole.shape[:2] == (method.sample_count(t), 3)
        torch.testing.assert_close(out["s"], whole, rtol=1e-5, atol=self.atol)
        assert seen and max(seen) <= max_rows, f"a forward saw {max(seen)} rows"

    def test_save_load_round_trip(self, case, tmp_path):
        method, x = case
        method.save(tmp_path / "bundle")
        loaded = bayesify.load(tmp_path / "bundle")
        assert type(loaded) is type(method)
        assert loaded.config == method.config
        a = method.predict(x, samples=self.samples, seed=4)
        b = loaded.predict(x, samples=self.samples, seed=4)
        torch.testing.assert_close(a.samples, b.samples, rtol=1e-6, atol=1e-6)
        if method.config.task is Task.REGRESSION:
            assert loaded.noise_variance == method.noise_variance

    def test_bad_inputs_raise_clear_errors(self, case):
        method, x = case
        with pytest.raises(ValueError, match="shape"):
            method.predict(x.reshape(len(x), -1)[:, :3], samples=2)
        bad = x.clone()
        bad[0].view(-1)[0] = float("nan")
        with pytest.raises(ValueError, match="non-finite"):
            method.predict(bad, samples=2)
        with pytest.raises(ValueError, match="samples"):
            method.predict(x, samples=0)

    def test_registered_by_name(self, case):
        method, _ = case
        assert bayesify.get_method(method.name) is type(method)
