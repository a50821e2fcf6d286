"""MCBN's bank rows per data row (the default) against one draw per call (``bank_draw="call"``,
benchmarks/deferral.md): within one call the per-row draws behave as independent uniform
orderings of the bank, checked by chi-square tests against that law; the per-call draw is shared
by every row, so a call's scores move together with its seed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy import stats

import bayesify
from bayesify.models import lenet
from bayesify.nn.bank_draw import BankRowDraw


def fitted(bank_size: int = 8, bank_draw: str = "row") -> tuple[bayesify.MCBN, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (128,), generator=g)
    method = bayesify.MCBN(
        lenet(norm="batch"), task="classification", bank_size=bank_size, bank_draw=bank_draw
    )
    method.fit((x[:96], y[:96]), epochs=1, batch_size=16, progress=False)
    return method, x[96:]


def mutual_information(method: bayesify.MCBN, x: torch.Tensor, samples: int, seed: int):
    return method.to_predictive(method.sample(x, samples, seed=seed)).mutual_information


def test_per_call_every_row_of_a_call_uses_the_same_bank_rows():
    method, x = fitted(bank_draw="call")
    rows = method.draw_rows(4, torch.Generator().manual_seed(3))
    whole = method.sample(x, 4, seed=3)
    for i in (0, 17, 31):  # one row alone, same seed: the same 4 bank rows, the same samples
        assert torch.allclose(method.sample(x[i : i + 1], 4, seed=3)[:, 0], whole[:, i], atol=1e-5)
    assert len(set(rows.tolist())) == 4
    same = x[:1].expand(6, *x.shape[1:])  # one input six times: six identical sample sets
    out = method.sample(same, 4, seed=3)
    assert torch.allclose(out, out[:, :1].expand_as(out), atol=1e-6)


def test_per_row_rows_that_share_an_input_get_different_draws():
    method, x = fitted()
    same = x[:1].expand(40, *x.shape[1:])
    out = method.sample(same, 4, seed=3)[..., 0]  # [T, 40]
    rows = method.bank_rows(4, 40, torch.Generator().manual_seed(3))
    assert len({tuple(c) for c in rows.T.tolist()}) > 30  # 8·7·6·5 = 1680 orderings
    assert all(len(set(c)) == 4 for c in rows.T.tolist())  # distinct within a row (T <= B)
    for i, j in itertools.combinations(range(40), 2):  # same bank rows <=> same samples
        same_rows = bool((rows[:, i] == rows[:, j]).all())
        assert same_rows == torch.allclose(out[:, i], out[:, j], atol=1e-6)


def test_at_the_bank_size_a_rows_score_does_not_depend_on_the_seed():
    for bank_draw in ("row", "call"):
        method, x = fitted(bank_size=8, bank_draw=bank_draw)
        half = [mutual_information(method, x, 4, seed) for seed in (0, 1, 2)]
        assert any(not torch.allclose(half[0], h, rtol=1e-3) for h in half[1:])  # draws differ
        full = [mutual_information(method, x, method.bank_size, seed) for seed in (0, 1, 2)]
        for f in full[1:]:
            torch.testing.assert_close(full[0], f, rtol=1e-4, atol=1e-6)


def test_per_row_scores_of_one_call_do_not_move_together():
    """Per call, a row's MI error at T = 4 is the call's: the call's mean MI varies over seeds
    as much as one row's does. Per row the errors average out over the 32 rows."""

    def spread(bank_draw: str) -> tuple[float, float]:
        method, x = fitted(bank_draw=bank_draw)
        mi = torch.stack([mutual_information(method, x, 4, s) for s in range(12)])  # [S, N]
        exact = mutual_information(method, x, method.bank_size, 0)
        err = mi - exact
        return float(err.mean(1).std()), float(err.std(0).mean())

    call_mean, call_row = spread("call")
    row_mean, row_row = spread("row")
    assert call_mean > 0.5 * call_row  # shared draw: the mean error is as large as a row's
    assert row_mean < 0.35 * row_row  # independent draws: about 1/sqrt(32) of a row's


@pytest.mark.parametrize("bank_size", [5, 8])
def test_per_row_draws_follow_independent_uniform_orderings(bank_size):
    """20,000 rows of one block: the first bank row is uniform; the first two are a uniform
    ordered pair of distinct rows; neighbouring rows' first rows are independent; beyond the
    bank size each cycle is a whole ordering of the bank (chi-square tests, scipy)."""
    n, b = 20_000, bank_size
    rows = BankRowDraw(b, key=123_456_789).rows(0, 2 * b, 0, n).numpy()  # [2B, n]
    first = np.bincount(rows[0], minlength=b)
    assert stats.chisquare(first).pvalue > 1e-3
    pairs = np.bincount(rows[0] * b + rows[1], minlength=b * b).reshape(b, b)
    assert np.diag(pairs).sum() == 0
    off = pairs[~np.eye(b, dtype=bool)]
    assert stats.chisquare(off).pvalue > 1e-3
    table = np.zeros((b, b))
    np.add.at(table, (rows[0, :-1], rows[0, 1:]), 1)
    assert stats.chi2_contingency(table).pvalue > 1e-3
    for cycle in (rows[:b], rows[b:]):
        assert (np.sort(cycle, axis=0) == np.arange(b)[:, None]).all()
    assert (rows[:b] != rows[b:]).any(axis=0).mean() > 0.9  # cycles ordered independently


def test_per_row_draws_replay_over_chunks_and_ranges():
    """A row's draws depend on its index only: chunks (inside or beyond the rows computed
    ahead), a fresh draw object and a range of groups give the same rows."""
    whole = BankRowDraw(8, key=7).rows(0, 12, 0, 600)
    draw = BankRowDraw(8, key=7)
    chunks = [draw.rows(0, 12, a, 50) for a in range(0, 600, 50)]
    torch.testing.assert_close(torch.cat(chunks, 1), whole)
    torch.testing.assert_close(BankRowDraw(8, key=7).rows(0, 12, 270, 30), whole[:, 270:300])
    torch.testing.assert_close(BankRowDraw(8, key=7).rows(3, 10, 0, 600), whole[3:10])
    assert not torch.equal(BankRowDraw(8, key=8).rows(0, 12, 0, 600), whole)
