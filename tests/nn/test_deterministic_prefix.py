"""The deterministic prefix of a Sequential runs once per data row, and sampling is unchanged."""

from __future__ import annotations

import torch
from torch import nn

from bayesify import MCDropout
from bayesify.nn.dropout import MCDropout as DropoutLayer
from bayesify.nn.folding import deterministic_prefix


class RowCounter(nn.Module):
    """Identity that counts the rows it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += len(x)
        return x


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        RowCounter(), nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
        nn.Linear(16, 3),
    )  # fmt: skip


def test_prefix_stops_at_the_first_stochastic_layer() -> None:
    net = nn.Sequential(
        nn.Linear(2, 2), nn.Sequential(nn.ReLU(), DropoutLayer(0.5)), nn.Linear(2, 1)
    )
    assert deterministic_prefix(net) == 1
    assert deterministic_prefix(nn.Sequential(nn.Linear(2, 2), nn.ReLU())) == 2
    assert deterministic_prefix(nn.Linear(2, 2)) == 0  # not a Sequential
    hooked = nn.Sequential(nn.Linear(2, 2), DropoutLayer(0.5))
    hooked.register_forward_hook(lambda *a: None)
    assert deterministic_prefix(hooked) == 0  # a split would skip the user's hook


def test_layers_before_dropout_see_each_row_once_and_samples_match_the_loop() -> None:
    m = MCDropout(_net(), task="classification", dropout=0.3, where="before-last-linear")
    counter = m.net[0]
    x = torch.randn(5, 6)
    counter.rows = 0
    one_pass = m.sample(x, 40, seed=3, max_rows=None)
    assert counter.rows == 5  # not 40 * 5
    loop = m.reference_samples(x, 40, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(one_pass, loop)
    # the samples really vary: the prefix was shared, the dropout head was not
    assert one_pass.std(0).mean() > 1e-3
    # chunked over rows and over sample groups: the prefix still runs once per chunk of rows
    counter.rows = 0
    chunked = m.sample(x, 40, seed=3, max_rows=8)
    torch.testing.assert_close(chunked, one_pass)


def test_adaptive_rounds_reuse_the_prefix_and_draw_what_the_plain_rounds_draw(monkeypatch) -> None:
    m = MCDropout(_net(), task="classification", dropout=0.5, where="before-last-linear")
    counter = m.net[0]
    x = torch.randn(30, 6) * 3
    counter.rows = 0
    cached = m.predict(x, samples="adaptive", tol=0.02, start=4, max_samples=32, seed=5)
    assert counter.rows == 30  # the prefix ran once over the rows, not once per round
    used = cached.samples_used
    assert (used > 4).any() and (used == 4).any()  # some rows needed more rounds, some did not
    monkeypatch.setattr(type(m), "_prefix_sampler", lambda self, *a: None)
    counter.rows = 0
    plain = m.predict(x, samples="adaptive", tol=0.02, start=4, max_samples=32, seed=5)
    assert counter.rows > 30  # every round ran the prefix again over its rows
    torch.testing.assert_close(cached.samples, plain.samples, rtol=0, atol=0)
    assert torch.equal(cached.samples_used, plain.samples_used)
