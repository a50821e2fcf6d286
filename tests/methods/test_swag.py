"""SWAG and MultiSWAG: moments against SGD recorded by hand, the covariance of draws against
the closed form, batch norm per sample against a train-mode pass, and the shared suite."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from conformance import MethodConformance
from test_mcbn import regression_data
from torch import nn

import bayesify
from bayesify.models import mlp
from bayesify.train import as_loader


def _pretrained(net, n=120, **options):
    x, y = regression_data(160)
    options = {"epochs": 2, "batch_size": 20, "collect_every": 3, "rank": 4, **options}
    cls = options.pop("cls", bayesify.SWAG)
    method = cls.from_pretrained(net, (x[:n], y[:n]), val=(x[n:], y[n:]), **options)
    return method, x[n : n + 20]


class TestSWAGRegressionBatchNorm(MethodConformance):
    def make(self):
        return _pretrained(mlp(5, hidden=(8,), norm="batch"), bn_rows=16)


class TestSWAGNoBatchNorm(MethodConformance):
    def make(self):
        return _pretrained(mlp(5, hidden=(8,), norm=None), schedule="cyclic", lr=0.05)


class TestMultiSWAGSwaStatistics(MethodConformance):
    samples = 7  # M = 3 does not divide T: 9 samples, 3 per member

    def make(self):
        net = mlp(5, hidden=(8, 8), norm="batch", dropout=0.1)
        return _pretrained(net, cls=bayesify.MultiSWAG, batch_norm="swa", bn_rows=16)


class TestSWAGConvClassifier(MethodConformance):
    def make(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(48, 1, 8, 8, generator=g)
        y = torch.randint(0, 3, (48,), generator=g)
        net = nn.Sequential(nn.Conv2d(1, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
                            nn.Flatten(), nn.Linear(144, 3))  # fmt: skip
        method = bayesify.SWAG.from_pretrained(
            net, (x, y), task="classification", epochs=2, batch_size=16, collect_every=1,
            bn_rows=12, rank=3,
        )  # fmt: skip
        return method, x[:6]


def _hand_sgd(net, data, steps_lr, momentum, batch_size, seed):
    """Plain SGD written out, the flat weights recorded after every step."""
    net = copy.deepcopy(net)
    opt = torch.optim.SGD(net.parameters(), lr=steps_lr[0], momentum=momentum)
    loader = as_loader(data, batch_size, shuffle=True, seed=seed)
    recorded, step = [], 0
    while step < len(steps_lr):
        for xb, yb in loader:
            for group in opt.param_groups:
                group["lr"] = steps_lr[step]
            loss = nn.functional.mse_loss(net(xb).reshape(yb.shape), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            recorded.append(torch.cat([p.detach().reshape(-1) for p in net.parameters()]))
            step += 1
    return torch.stack(recorded)


@pytest.mark.parametrize("schedule", ["constant", "cyclic"])
def test_moments_and_deviations_match_sgd_recorded_by_hand(schedule):
    torch.manual_seed(0)
    x, y = regression_data(60)
    net = mlp(5, hidden=(4,), norm=None)
    epochs, bs, every, rank, lr, lr_min = 3, 20, 2, 3, 0.05, 0.01  # 9 steps, snapshots 2,4,6,8
    method = bayesify.SWAG.from_pretrained(
        net, (x, y), epochs=epochs, lr=lr, schedule=schedule, swag_lr_min=lr_min,
        batch_size=bs, collect_every=every, rank=rank, seed=3,
    )  # fmt: skip
    steps = epochs * 60 // bs
    if schedule == "constant":
        rates = [lr] * steps
    else:  # linear from lr to lr_min within each cycle of `every` steps
        rates = [(1 - t) * lr + t * lr_min for t in ((i % every + 1) / every for i in range(steps))]
    theta = _hand_sgd(net, (x, y), rates, 0.9, bs, seed=3)[every - 1 :: every]  # [4, P]
    snapshots = len(theta)
    # the two-line reference: moments of the snapshots, deviations from the running mean
    mean, sq_mean = theta.mean(0), theta.square().mean(0)
    running = theta.cumsum(0) / torch.arange(1, snapshots + 1)[:, None]
    dev = (theta - running)[-rank:]
    swag = method.net
    assert swag.counts.tolist() == [snapshots]
    torch.testing.assert_close(swag.mean[0], mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(swag.sq_mean[0], sq_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(swag.deviations[0], dev, rtol=1e-4, atol=1e-6)
    # the wrapped network holds the SWA mean; the caller's does not move
    flat = torch.cat([p.detach().reshape(-1) for p in swag.base.parameters()])
    torch.testing.assert_close(flat, mean)
    assert not torch.equal(torch.cat([p.detach().reshape(-1) for p in net.parameters()]), mean)


def test_covariance_of_draws_in_one_call_is_the_closed_form():
    x, y = regression_data(80)
    method, _ = _pretrained(mlp(5, hidden=(2,), norm=None), epochs=6, lr=0.1, collect_every=2,
                            rank=5)  # fmt: skip
    swag = method.net
    k = min(int(swag.counts[0]), 5)
    assert k == 5
    d = swag.deviations[0, :k].double()  # [K, P]
    var = (swag.sq_mean[0] - swag.mean[0].square()).double()
    closed = 0.5 * (torch.diag(var) + d.T @ d / (k - 1))  # diag/2 + DDᵀ/(2(K−1))
    draws = method.sample_weights(60_000, generator=torch.Generator().manual_seed(0)).double()
    assert draws.shape == (60_000, swag.mean.shape[1])
    torch.testing.assert_close(draws.mean(0), swag.mean[0].double(), rtol=0,
                               atol=4 * math.sqrt(closed.diag().max() / 60_000))  # fmt: skip
    cov = torch.cov(draws.T)
    err = (cov - closed).norm() / closed.norm()
    assert err < 0.03, f"relative Frobenius error {err:.3f}"
    # without the low-rank term the covariance would be far off: the test can fail
    assert (0.5 * torch.diag(var) - closed).norm() / closed.norm() > 0.1


def test_each_sample_is_the_net_with_its_weights_and_batch_norm_updated_on_the_kept_rows():
    """Sample t equals the plain network carrying weights θ_t whose batch-norm running
    statistics were reset and updated by one train-mode pass (momentum None) over the rows the
    bundle keeps: Maddox et al.'s bn_update, on those rows."""
    method, x = _pretrained(mlp(5, hidden=(8,), norm="batch"), bn_rows=24)
    swag = method.net
    assert swag.bn_inputs.shape == (24, 5)
    out = method.sample(x, 4, generator=torch.Generator().manual_seed(7))
    theta = method.sample_weights(4, generator=torch.Generator().manual_seed(7))
    for t in range(4):
        net = copy.deepcopy(swag.base)
        torch.nn.utils.vector_to_parameters(theta[t], net.parameters())
        for m in net.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.reset_running_stats()
                m.momentum = None
        net.train()
        with torch.no_grad():
            net(swag.bn_inputs)
            net.eval()
            torch.testing.assert_close(out[t], net(x), rtol=1e-4, atol=1e-5)


def test_swa_statistics_mode_shares_each_members_statistics():
    method, x = _pretrained(mlp(5, hidden=(8,), norm="batch"), bn_rows=16, batch_norm="swa")
    bn = method.net.base[1]
    stats = method.net.swa_statistics()
    torch.testing.assert_close(stats["1.running_mean"][0], bn.running_mean)
    assert method.predict(x, samples=4, seed=0).samples.std(0).max() > 1e-4


def test_multiswag_members_start_from_the_same_weights_and_follow_their_own_orders():
    method, x = _pretrained(mlp(5, hidden=(8,), norm=None), cls=bayesify.MultiSWAG)
    means = method.net.mean
    assert means.shape[0] == 3 and method.sample_count(4) == 6
    assert not torch.allclose(means[0], means[1]) and not torch.allclose(means[1], means[2])
    out = method.sample(x, 6, seed=0)
    # sample k*M + m comes from member m: each member's draws centre on its own mean
    theta = method.sample_weights(3000, generator=torch.Generator().manual_seed(1))
    for m in range(3):
        apart = (means[m] - means[(m + 1) % 3]).abs().max()
        assert (theta[m::3].mean(0) - means[m]).abs().max() < apart
    assert out.shape[:2] == (6, len(x))


def test_multiswag_of_several_trained_networks_runs_member_m_from_network_m(tmp_path):
    """Given M trained networks, trajectory m is the one SWAG collects from network m alone
    (its seed + m): the same moments; the networks are left as they were, the bundle
    round-trips, and fit() (which would train only the first) is refused."""
    x, y = regression_data(160)
    nets = []
    for m in range(3):
        torch.manual_seed(10 + m)
        nets.append(mlp(5, hidden=(8,), norm=None))
    before = [copy.deepcopy(n.state_dict()) for n in nets]
    opts = {"epochs": 2, "batch_size": 20, "collect_every": 3, "rank": 4, "seed": 7}
    multi = bayesify.MultiSWAG.from_pretrained(nets, (x[:120], y[:120]), **opts)
    assert multi.members == 3
    for m, net in enumerate(nets):
        for k, v in net.state_dict().items():
            assert torch.equal(v, before[m][k])  # read, never changed
        single = bayesify.SWAG.from_pretrained(net, (x[:120], y[:120]), **{**opts, "seed": 7 + m})
        torch.testing.assert_close(multi.net.mean[m], single.net.mean[0])
        torch.testing.assert_close(multi.net.deviations[m], single.net.deviations[0])
    assert not torch.allclose(multi.net.mean[0], multi.net.mean[1])
    path = multi.save(tmp_path / "multi")
    again = bayesify.load(path)
    assert torch.equal(again.sample(x[120:130], 6, seed=1), multi.sample(x[120:130], 6, seed=1))
    with pytest.raises(ValueError, match="fit\\(\\) would train only the first"):
        multi.fit((x, y), epochs=1)
    with pytest.raises(ValueError, match="members must equal the 3 networks"):
        bayesify.MultiSWAG(nets, members=2)
    with pytest.raises(ValueError, match="MultiSWAG member 1 differs"):
        bayesify.MultiSWAG([nets[0], mlp(5, hidden=(9,), norm=None)])


def test_fit_trains_then_collects():
    x, y = regression_data(100)
    method = bayesify.SWAG(mlp(5, hidden=(8,), norm=None), swag_epochs=2, collect_every=2)
    method.fit((x, y), epochs=2, batch_size=20, progress=False)
    assert method.net.counts.tolist() == [5]  # 5 steps per epoch, a snapshot every 2 of 10


def test_clear_errors():
    x, y = regression_data(40)
    with pytest.raises(ValueError, match="needs the training data"):
        bayesify.SWAG.from_pretrained(mlp(5, hidden=(4,), norm=None))
    with pytest.raises(ValueError, match="needs at least 2"):
        bayesify.SWAG.from_pretrained(mlp(5, hidden=(4,), norm=None), (x, y), epochs=1,
                                      batch_size=20)  # fmt: skip
    with pytest.raises(ValueError, match="unknown schedule"):
        bayesify.SWAG(mlp(5, hidden=(4,), norm=None), schedule="step")
    with pytest.raises(ValueError, match="rank must be >= 1"):
        bayesify.SWAG(mlp(5, hidden=(4,), norm=None), rank=0)
    with pytest.raises(ValueError, match="collected no moments"):
        bayesify.SWAG(mlp(5, hidden=(4,), norm=None)).predict(x, samples=2)


def test_paper_preset():
    method = bayesify.SWAG(mlp(5, hidden=(4,), norm=None), preset="paper")
    assert method.config.rank == 20 and method.config.scale == 0.5
    assert method.config.schedule == "constant"


def gap_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """y = sin x + N(0, 0.1²) on x in [-3, -1] ∪ [1, 3]: a gap at 0, nothing beyond ±3."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=g) * 2 + 1
    x = torch.where(torch.arange(n)[:, None] % 2 == 0, x, -x)
    return x, torch.sin(x[:, 0]) + 0.1 * torch.randn(n, generator=g)


IN_DATA, FAR = torch.tensor([[-2.0], [-1.5], [1.5], [2.0]]), torch.tensor([[-5.0], [5.0]])


def _swag_on_gap_data(**options):
    torch.manual_seed(0)
    method = bayesify.SWAG(mlp(1, 1, (50,), norm=None), **options)
    method.fit(gap_data(200, 0), val=gap_data(100, 1), epochs=200, batch_size=32, lr=1e-2,
               progress=False)  # fmt: skip
    epistemic = [float(method.predict(x, 200, seed=1).epistemic_variance.sqrt().mean())
                 for x in (IN_DATA, FAR)]  # fmt: skip
    return method, epistemic[0], epistemic[1], math.sqrt(method.noise_variance)


@pytest.mark.filterwarnings("ignore::bayesify.methods.core.spread.NegligibleSpreadWarning")
def test_default_rate_spreads_far_from_the_data_and_the_old_rate_did_not():
    # the default collects with fit's optimiser at its rate (Adam, 0.01): 2.5 x the in-data
    # epistemic std at x = ±5 (measured 3.1 x) and there at least 0.6 x the noise std
    # (measured 0.9 x); the old default, SGD at 0.01 after Adam training, reached 0.45 x
    method, inside, far, noise = _swag_on_gap_data()
    assert method.collected_with == (1e-2, "adam")
    assert far >= 2.5 * inside and far >= 0.6 * noise, (inside, far, noise)
    old, inside, far, noise = _swag_on_gap_data(swag_lr=0.01, swag_optimizer="sgd")
    assert old.collected_with == (0.01, "sgd")
    assert far < 0.6 * noise, (inside, far, noise)


def test_a_collapsed_gaussian_warns_in_one_line_naming_what_to_change(tmp_path):
    x, y = regression_data(160)
    with pytest.warns(bayesify.methods.core.spread.NegligibleSpreadWarning) as caught:
        method = bayesify.SWAG.from_pretrained(mlp(5, hidden=(8,), norm=None), (x[:120], y[:120]),
                                               val=(x[120:], y[120:]), lr=1e-6, epochs=3,
                                               batch_size=20)  # fmt: skip
    message = str(caught[0].message)
    assert "\n" not in message and message.startswith("SWAG: the weight-driven spread")
    assert "raise swag_lr toward the training rate (collected with sgd at 1e-06)" in message
    assert method.epistemic_share < 0.01
    with pytest.warns(bayesify.methods.core.spread.NegligibleSpreadWarning, match="sgd at 1e-06"):
        bayesify.load(method.save(tmp_path / "b")).predict(x[120:], samples=8, seed=0)


def test_the_deterministic_network_never_warns():
    import warnings

    x, y = regression_data(100)
    method = bayesify.Deterministic(mlp(5, hidden=(8,), norm=None))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        method.fit((x[:80], y[:80]), val=(x[80:], y[80:]), epochs=1, progress=False)
        method.predict(x[80:], samples=4)
