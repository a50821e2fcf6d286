"""The shared training loop."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from bayesify.train import as_loader, make_optimizer, train_loop


def _problem():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 3, generator=g)
    w = torch.tensor([1.0, -2.0, 0.5])
    return x, x @ w


def _run(seed: int, epochs: int = 5, **kw):
    torch.manual_seed(seed)
    net = nn.Linear(3, 1)
    x, y = _problem()
    loader = as_loader((x, y), 16, shuffle=True, seed=seed)
    opt = make_optimizer([{"params": net.parameters()}], "adam", 0.05)
    hist = train_loop(
        net,
        lambda xb, yb, p: ((net(xb).squeeze(-1) - yb) ** 2).mean(),
        loader,
        opt,
        epochs=epochs,
        progress=False,
        **kw,
    )
    return net, hist


def test_loss_goes_down_and_is_reproducible():
    net, hist = _run(0, epochs=30)
    assert hist.train_loss[-1] < 0.05 * hist.train_loss[0]
    net2, hist2 = _run(0, epochs=30)
    assert hist.train_loss == hist2.train_loss
    torch.testing.assert_close(net.weight, net2.weight, rtol=0, atol=0)


def test_early_stopping_restores_best_epoch():
    scores = iter([3.0, 1.0, 2.0, 2.5, 4.0, 5.0])
    snapshots = []

    net, hist = None, None
    torch.manual_seed(0)
    net = nn.Linear(3, 1)
    x, y = _problem()

    def validate():
        snapshots.append(net.weight.detach().clone())
        return next(scores)

    opt = make_optimizer([{"params": net.parameters()}], "sgd", 0.01)
    hist = train_loop(
        net,
        lambda xb, yb, p: ((net(xb).squeeze(-1) - yb) ** 2).mean(),
        as_loader((x, y), 16, shuffle=True),
        opt,
        epochs=6,
        validate=validate,
        patience=2,
        progress=False,
    )
    assert hist.best_epoch == 1 and hist.stopped_early and hist.epochs == 4
    torch.testing.assert_close(net.weight, snapshots[1])


def test_progress_fraction_reaches_every_step():
    seen = []
    net = nn.Linear(3, 1)
    x, y = _problem()
    loader = as_loader((x, y), 32, shuffle=False)
    opt = make_optimizer([{"params": net.parameters()}], "adam", 1e-3)

    def objective(xb, yb, p):
        seen.append(p)
        return net(xb).pow(2).mean()

    train_loop(net, objective, loader, opt, epochs=2, progress=False)
    assert seen == [i / 8 for i in range(8)]


def test_clear_errors():
    x, y = _problem()
    with pytest.raises(ValueError, match="rows"):
        as_loader((x, y[:5]), 8, shuffle=True)
    with pytest.raises(ValueError, match="non-finite"):
        as_loader((x * float("nan"), y), 8, shuffle=True)
    with pytest.raises(ValueError, match="valid: adam"):
        make_optimizer([{"params": nn.Linear(1, 1).parameters()}], "lbfgs", 0.1)
    net = nn.Linear(3, 1)
    opt = make_optimizer([{"params": net.parameters()}], "sgd", 1e6)
    with pytest.raises(FloatingPointError, match="learning rate"):
        train_loop(
            net,
            lambda xb, yb, p: (net(xb).squeeze(-1) - yb).pow(2).mean() * 1e30,
            as_loader((x, y), 16, shuffle=True),
            opt,
            epochs=3,
            progress=False,
        )


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_fused_adam_takes_the_same_steps_as_the_reference_loop(name: str) -> None:
    """make_optimizer uses torch's fused Adam kernel; its steps equal the per-tensor loop's."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    ref = copy.deepcopy(net)
    opt = make_optimizer([{"params": net.parameters(), "weight_decay": 0.01}], name, 0.05)
    assert opt.defaults["fused"] or opt.param_groups[0].get("fused")
    cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    ref_opt = cls(ref.parameters(), lr=0.05, weight_decay=0.01, foreach=False)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for _ in range(5):
        for model, o in ((net, opt), (ref, ref_opt)):
            o.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            o.step()
    for a, b in zip(net.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(("shuffle", "rows"), [(True, 100), (True, 96), (False, 100)])
def test_tensor_loader_gives_the_row_wise_loaders_batches(shuffle, rows):
    """Whole-batch indexing of in-memory rows: the batches and order of torch's row-by-row
    loader with the same seed, epoch after epoch, and the global RNG left alone."""
    from torch.utils.data import DataLoader, TensorDataset

    x, y = torch.randn(rows, 3), torch.arange(rows)
    ours = as_loader((x, y), 16, shuffle=shuffle, seed=7)
    ref = DataLoader(
        TensorDataset(x, y), batch_size=16, shuffle=shuffle, drop_last=shuffle,
        generator=torch.Generator().manual_seed(7),
    )  # fmt: skip
    assert len(ours) == len(ref)
    torch.manual_seed(3)
    got = [[(a.clone(), b.clone()) for a, b in ours] for _ in range(3)]
    after_ours = torch.rand(1)
    torch.manual_seed(3)
    want = [list(ref) for _ in range(3)]
    torch.testing.assert_close(torch.rand(1), after_ours)
    for epoch_got, epoch_want in zip(got, want, strict=True):
        assert len(epoch_got) == len(epoch_want)
        for (a, b), (c, d) in zip(epoch_got, epoch_want, strict=True):
            assert torch.equal(a, c) and torch.equal(b, d)
    if shuffle:
        assert not torch.equal(got[0][0][1], got[1][0][1])  # reshuffled every epoch
