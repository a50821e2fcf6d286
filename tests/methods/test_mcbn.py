"""MCBN: the shared suite, and equivalence with Teye et al.'s Algorithm 1."""

from __future__ import annotations

import copy

import pytest
import torch
from conformance import MethodConformance, regression_data
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import bayesify
from bayesify.models import lenet, mlp
from bayesify.nn import MCBatchNorm


class TestMCBNRegression(MethodConformance):
    def make(self):
        x, y = regression_data()
        method = bayesify.MCBN(mlp(5, hidden=(16, 16)), bank_size=16)
        method.fit(
            (x[:200], y[:200]), val=(x[200:], y[200:]), epochs=3, batch_size=16, progress=False
        )
        return method, x[200:230]


class TestMCBNClassification(MethodConformance):
    def make(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(96, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (96,), generator=g)
        method = bayesify.MCBN(lenet(norm="batch"), task="classification", bank_size=8)
        method.fit((x, y), epochs=1, batch_size=16, progress=False)
        return method, x[:10]


def teye_algorithm_1(net: nn.Module, x: torch.Tensor, batches: list[torch.Tensor]) -> torch.Tensor:
    """Teye et al.'s Algorithm 1 with torch's own BatchNorm: for each mini-batch B, take B's
    batch mean and (biased) variance in every BN layer, then predict x with them."""
    outs = []
    for b in batches:
        ref = copy.deepcopy(net)
        bns = [m for m in ref.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        for bn in bns:
            bn.momentum = 1.0  # running stats := this batch's stats
        ref.train()
        with torch.no_grad():
            ref(b)
        for bn, n in zip(bns, _rows_per_channel(ref, b), strict=True):
            bn.running_var.mul_((n - 1) / n)  # torch stores the unbiased variance
        ref.eval()
        with torch.no_grad():
            outs.append(ref(x))
    return torch.stack(outs)


def _rows_per_channel(net: nn.Module, batch: torch.Tensor) -> list[int]:
    """Number of values per channel each BN layer averages over for this batch."""
    sizes: list[int] = []
    hooks = [
        m.register_forward_hook(lambda m, i, o: sizes.append(i[0].numel() // i[0].shape[1]))
        for m in net.modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
    ]
    with torch.no_grad():
        net.eval()(batch)
    for h in hooks:
        h.remove()
    return sizes


def _trained_convnet() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    net = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, bias=False),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 8 * 8, 12, bias=False),
        nn.BatchNorm1d(12),
        nn.ReLU(),
        nn.Linear(12, 3),
    )
    x = torch.randn(128, 1, 8, 8, generator=g)
    y = torch.randint(0, 3, (128,), generator=g)
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    for _ in range(20):  # a few steps so weights and running statistics are not trivial
        idx = torch.randperm(128, generator=g)[:32]
        loss = nn.functional.cross_entropy(net.train()(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net.eval(), x, y


@pytest.mark.parametrize("bank_draw", ["row", "call"])
@pytest.mark.parametrize("T", [1, 5, 12])
def test_one_pass_equals_teye_algorithm_1(T, bank_draw):
    """Each data row's sample t is Algorithm 1 with the mini-batch of its bank row: per row
    (the default) or one draw shared by the call's rows."""
    net, x, y = _trained_convnet()
    reference_net = copy.deepcopy(net)
    b = 16
    batches: list[torch.Tensor] = []  # the bank's mini-batches, as they are forwarded
    hook = net.register_forward_pre_hook(lambda _m, args: batches.append(args[0].clone()))
    method = bayesify.MCBN.from_pretrained(
        net, (x, y), batch_size=b, task="classification", bank_size=8, bank_draw=bank_draw
    )
    hook.remove()
    assert [len(xb) for xb in batches] == [b] * 8
    query = torch.randn(7, 1, 8, 8, generator=torch.Generator().manual_seed(9))
    rows = method.bank_rows(T, len(query), torch.Generator().manual_seed(11))  # [T, N]
    one_pass = method.sample(query, T, generator=torch.Generator().manual_seed(11))
    for i in range(len(query)):
        expected = teye_algorithm_1(
            reference_net, query[i : i + 1], [batches[r] for r in rows[:, i]]
        )
        torch.testing.assert_close(one_pass[:, i : i + 1], expected, rtol=1e-5, atol=1e-5)
    if bank_draw == "call":
        assert (rows == rows[:, :1]).all()
        torch.testing.assert_close(
            rows[:, 0], method.draw_rows(T, torch.Generator().manual_seed(11))
        )
    elif T > 1:
        assert (rows != rows[:, :1]).any()


def test_bank_leaves_weights_and_running_stats_alone():
    net, x, y = _trained_convnet()
    before = copy.deepcopy(net.state_dict())
    method = bayesify.MCBN.from_pretrained(
        net, (x, y), batch_size=16, task="classification", bank_size=5
    )
    after = method.net.state_dict()
    for k, v in before.items():
        torch.testing.assert_close(after[k], v, rtol=0, atol=0)
    assert method.bank_size == 5
    assert all(layer.bank_mean.shape[0] == 5 for layer in method.layers)


def test_sampling_is_a_switch_independent_of_train_and_eval():
    net, x, y = _trained_convnet()
    original = copy.deepcopy(net)
    method = bayesify.MCBN.from_pretrained(
        net, (x, y), batch_size=16, task="classification", bank_size=4
    )
    layers = [m for m in method.net.modules() if isinstance(m, MCBatchNorm)]
    method.net.train()
    method.net.eval()
    assert not any(m.stochastic for m in layers)
    with torch.no_grad():  # outside sampling: exactly torch's BatchNorm in eval mode
        torch.testing.assert_close(method.net(x[:4]), original(x[:4]))
    # inside sampling, .eval() does not turn MCBN off: two groups use two different batches
    method.net.eval()
    out = method.sample(x[:4], 2, seed=0)
    assert (out[0] - out[1]).abs().max() > 1e-4


def test_without_batchnorm_is_a_clear_error():
    with pytest.raises(ValueError, match="BatchNorm"):
        bayesify.MCBN(mlp(3, norm=None))


def test_user_network_with_momentum_none_trains_like_torch():
    torch.manual_seed(0)
    theirs = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4, momentum=None))
    ours = bayesify.MCBN(theirs).net  # a copy with MCBatchNorm in place of BatchNorm1d
    assert isinstance(ours[1], MCBatchNorm)
    xs = [torch.randn(8, 3) for _ in range(3)]
    for xb in xs:
        ours.train()(xb)
        theirs.train()(xb)
    torch.testing.assert_close(ours[1].running_var, theirs[1].running_var)
    torch.testing.assert_close(ours[1].running_mean, theirs[1].running_mean)


def _batch_sizes_seen(method: bayesify.MCBN) -> tuple[list[int], object]:
    """Rows of every forward through ``method.net`` (a hook; remove it with ``.remove()``)."""
    seen: list[int] = []
    handle = method.net.register_forward_pre_hook(lambda _m, args: seen.append(len(args[0])))
    return seen, handle


def test_bank_rebatches_a_dataloader_with_the_requested_size():
    x, y = regression_data(161)
    loader = DataLoader(TensorDataset(x, y), batch_size=16)  # 10 full batches and one of 1 row
    method = bayesify.MCBN(mlp(5, hidden=(8,)), bank_size=12)
    method.net.train()
    method.net(x[:32])  # running statistics, so the network is usable
    seen, hook = _batch_sizes_seen(method)
    method.fill_bank(loader, batch_size=40)
    hook.remove()
    assert seen == [40] * 12  # 4 full batches of 40 per pass over 161 rows, short ones dropped
    assert method.bank_batch_size == 40


def test_fit_on_a_dataloader_banks_its_batch_size():
    x, y = regression_data(161)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, drop_last=True)
    method = bayesify.MCBN(mlp(5, hidden=(8,)), bank_size=6)
    seen, hook = _batch_sizes_seen(method)
    method.fit(loader, epochs=1, batch_size=64, progress=False)  # the loader's 16 wins
    hook.remove()
    assert seen[:10] == [16] * 10  # training: the loader as it is
    assert seen[10:] == [16] * 6  # the bank: the training batch size
    assert method.bank_batch_size == 16
