"""The sampling block hands each stochastic layer its draws (a SamplingPlan), and the layer uses
exactly what it was handed: MC batch norm with bank rows, the Gaussian model, or given
statistics, checked against batch norm computed by hand."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from bayesify.nn import MCBatchNorm, repeat_samples, sampling, select_groups
from bayesify.nn.bank_draw import BankRowDraw
from bayesify.nn.mc_batchnorm import GroupStatistics, Statistics, StatisticsPlan
from bayesify.nn.stochastic import SamplingPlan, StochasticModule


def _banked_layer(c: int = 3, bank: int = 6) -> MCBatchNorm:
    torch.manual_seed(0)
    layer = MCBatchNorm(c)
    layer.weight.data = torch.tensor([1.5, 0.5, 2.0])[:c]
    layer.bias.data = torch.tensor([0.1, -0.2, 0.3])[:c]
    layer.set_bank(torch.randn(bank, c), torch.rand(bank, c) + 0.5)
    return layer.eval()


def _by_hand(layer: MCBatchNorm, x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor):
    """Batch norm of ``x [N, C]`` with statistics ``[C]``, written out."""
    return (x - mean) / torch.sqrt(var + layer.eps) * layer.weight + layer.bias


def test_bank_rows_handed_in_the_plan_choose_each_groups_statistics() -> None:
    layer = _banked_layer()
    x = torch.randn(4, 3)
    rows = torch.tensor([5, 0, 3])
    plan = StatisticsPlan(Statistics.BANK, rows=rows)
    with torch.no_grad(), sampling(layer, 3, draws={layer: plan}):
        out = layer(repeat_samples(x, 3)).view(3, 4, 3)
        select_groups(layer, 2, 3)
        alone = layer(x)
    for t, r in enumerate(rows):
        ref = _by_hand(layer, x, layer.bank_mean[r], layer.bank_var[r])
        torch.testing.assert_close(out[t], ref)
    torch.testing.assert_close(alone, out[2])
    assert not hasattr(layer, "rows") and not hasattr(layer, "effective_batch_size")


def test_per_row_bank_draws_choose_each_rows_statistics() -> None:
    """A plan with per-row draws: (group t, row i) uses bank row ``rows[t, i]``, also when the
    rows come in two chunks or a range of groups runs alone."""
    layer = _banked_layer()
    x = torch.randn(5, 3)
    draw = BankRowDraw(layer.bank_size, key=99)
    rows = draw.rows(0, 4, 0, 5)
    plan = StatisticsPlan(Statistics.BANK, row_draw=draw)
    with torch.no_grad(), sampling(layer, 4, draws={layer: plan}):
        out = layer(repeat_samples(x, 4)).view(4, 5, 3)
        select_groups(layer, 1, 3)
        head = layer(repeat_samples(x[:2], 2)).view(2, 2, 3)
        tail = layer(repeat_samples(x[2:], 2)).view(2, 3, 3)
    for t, i in itertools.product(range(4), range(5)):
        r = rows[t, i]
        ref = _by_hand(layer, x[i], layer.bank_mean[r], layer.bank_var[r])
        torch.testing.assert_close(out[t, i], ref)
    torch.testing.assert_close(torch.cat([head, tail], 1), out[1:3])
    with (
        pytest.raises(ValueError, match="bank"),
        sampling(
            layer, 2, draws={layer: StatisticsPlan(row_draw=BankRowDraw(layer.bank_size + 1, 0))}
        ),
    ):
        pass


def test_given_statistics_are_used_as_handed() -> None:
    layer = _banked_layer()
    x = torch.randn(5, 3)
    mean, var = torch.randn(2, 3), torch.rand(2, 3) + 0.1
    with torch.no_grad(), sampling(layer, 2, draws={layer: GroupStatistics(mean, var)}):
        out = layer(repeat_samples(x, 2)).view(2, 5, 3)
    for t in range(2):
        torch.testing.assert_close(out[t], _by_hand(layer, x, mean[t], var[t]))
    with (
        pytest.raises(ValueError, match="3 groups|2 groups"),
        sampling(layer, 3, draws={layer: GroupStatistics(mean, var)}),
    ):
        pass


def test_gaussian_plan_draws_from_the_blocks_generator() -> None:
    layer = _banked_layer()
    layer.spatial_size.fill_(1)
    plan = StatisticsPlan("gaussian", effective_batch_size=8.0)
    assert plan.statistics is Statistics.GAUSSIAN
    x = torch.randn(4, 3)
    runs = []
    for _ in range(2):
        with torch.no_grad(), sampling(layer, 5, torch.Generator().manual_seed(3), {layer: plan}):
            runs.append(layer(repeat_samples(x, 5)))
    torch.testing.assert_close(runs[0], runs[1])
    direct = layer.draw_gaussian_statistics(5, torch.Generator().manual_seed(3), 8.0)
    ref = torch.stack([_by_hand(layer, x, direct[0][t], direct[1][t]) for t in range(5)])
    torch.testing.assert_close(runs[0].view(5, 4, 3), ref)


def test_a_layer_without_its_draw_is_a_clear_error() -> None:
    layer = _banked_layer()
    with pytest.raises(RuntimeError, match="StatisticsPlan"), sampling(layer, 2):
        pass
    assert layer.stochastic is False  # the block was undone


def test_every_layer_receives_the_one_plan_of_the_block() -> None:
    seen: list[SamplingPlan] = []

    class Spy(StochasticModule):
        def begin_sampling(self, plan: SamplingPlan) -> None:
            super().begin_sampling(plan)
            seen.append(plan)

    a, b = Spy(), Spy()
    gen = torch.Generator().manual_seed(0)
    with sampling(nn.Sequential(a, b), 4, gen, {b: "b's draw"}):
        assert a.groups == b.groups == 4
    assert len(seen) == 2 and seen[0] is seen[1]
    assert seen[0].samples == 4 and seen[0].generator is gen
    assert seen[0].draw_for(a) is None and seen[0].draw_for(b) == "b's draw"
