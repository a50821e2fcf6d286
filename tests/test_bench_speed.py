"""`bayesify bench speed` on a tiny grid: ratios are the paired per-repetition ratios."""

from __future__ import annotations

import statistics

import pytest
import torch

from bayesify.bench.speed.command import SpeedOptions, run_speed, speed_markdown


def test_tiny_speed_grid_reports_paired_ratios_and_option_rows() -> None:
    s = SpeedOptions(
        methods=("MCDropout", "IBNN"),
        models=("mlp",),
        n=(2,),
        t=(3,),
        repeats=3,
        warmup=0,
        memory=False,
        train_models=("mlp",),
        train_rows=64,
    )
    result = run_speed(s, progress=False, train_variants=(("ibnn", (("train_samples", 2),)),))
    assert [(c.method, c.n, c.t) for c in result.cells] == [("mc-dropout", 2, 3), ("ibnn", 2, 3)]
    cell = result.cells[0]
    per_rep = [a / b for a, b in zip(cell.times["loop"], cell.times["one-pass"], strict=True)]
    assert cell.ratio("loop")[1] == statistics.median(per_rep)
    floor = [a / b for a, b in zip(cell.times["one-pass"], cell.times["floor"], strict=True)]
    assert cell.ratio("one-pass", "floor")[1] == statistics.median(floor)
    assert "one-pass / floor" in speed_markdown(result, "bayesify bench speed")
    labels = [t.label for t in result.training]
    assert labels == ["mc-dropout", "ibnn", "ibnn (train_samples=2)"]
    for t in result.training:
        assert len(t.times["method"]) == len(t.times["deterministic"]) == 3
    text = speed_markdown(result, "bayesify bench speed ...")
    assert "| ibnn (train_samples=2) | mlp |" in text
    assert "training per epoch, ibnn / mlp" in text  # the target line uses the default only
    assert "training per epoch, ibnn (train_samples=2)" not in text


def test_floor_is_the_plain_network_over_the_same_rows_in_chunks() -> None:
    """The floor of a cell: the plain network over T copies of every row, chunked as the one
    pass is (here T alone exceeds the row budget, so groups run in ranges), equals T plain
    passes over x."""
    import torch

    from bayesify.bench.speed.cases import build_case, plain_pass, random_data

    case = build_case("bbb", "lenet")
    x, _ = random_data("lenet", 3, seed=0)
    out = plain_pass(case, x, 200)  # 200 groups > the 167 rows of one LeNet forward
    with torch.no_grad():
        ref = case.plain(x)
    assert out.shape == (200, 3, 10)
    torch.testing.assert_close(out, ref.expand(200, 3, 10), rtol=1e-4, atol=1e-5)


def test_the_notes_give_mcbns_mini_batch_size_the_run_used() -> None:
    from bayesify.bench.speed.command import SpeedResult

    text = speed_markdown(SpeedResult(SpeedOptions(bank_batch=64)), "bayesify bench speed")
    assert "mini-batches of b = 64 random training rows" in text and "b = 32" not in text


@pytest.mark.parametrize("present", [False, True])
def test_a_cpu_run_says_whether_a_gpu_was_there(present: bool, monkeypatch) -> None:
    from bayesify.bench.speed.command import SpeedResult

    monkeypatch.setattr(torch.cuda, "is_available", lambda: present)
    text = speed_markdown(SpeedResult(SpeedOptions(device="cpu")), "bayesify bench speed")
    assert ("none was lent to this run" in text) is not present
    assert ("one is present but this run used the CPU" in text) is present
