"""`bayesify bench speed` on a tiny grid: ratios are the paired per-repetition ratios."""

from __future__ import annotations

import statistics

from bayesify.bench.experiments.speed import SpeedOptions, run_speed, speed_markdown


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
    labels = [t.label for t in result.training]
    assert labels == ["mc-dropout", "ibnn", "ibnn (train_samples=2)"]
    for t in result.training:
        assert len(t.times["method"]) == len(t.times["deterministic"]) == 3
    text = speed_markdown(result, "bayesify bench speed ...")
    assert "| ibnn (train_samples=2) | mlp |" in text
    assert "training per epoch, ibnn / mlp" in text  # the target line uses the default only
    assert "training per epoch, ibnn (train_samples=2)" not in text
