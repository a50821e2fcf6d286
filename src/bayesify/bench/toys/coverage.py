"""Coverage of prediction intervals and sets on held-out data, with and without conformal
calibration.

UCI regression (Gal's standard 90/10 splits): MCBN and MC dropout on Gal & Ghahramani's
one-hidden-layer net (the ``uci-methods`` settings). The validation part of each training split
(its last 20%) is cut in two: the first third picks the best epoch and fits τ, the rest
calibrates the conformal intervals only, so calibration rows are exchangeable with test rows.
Coverage is pooled over all test rows of all splits. Fashion-MNIST: a LeNet with MC dropout
trained briefly on a subset; conformal sets (APS, randomized APS, RAPS) are calibrated on random
halves of a pool of held-out test images and scored on the other half, averaged over repeats.

    bayesify bench coverage --out benchmarks/coverage.md
"""

from __future__ import annotations

import logging
import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch

from bayesify.bench.options import check_choices, command_line, option, write_report
from bayesify.bench.uci.methods import Settings, build
from bayesify.data import load_fashion_mnist, load_uci
from bayesify.methods import MCDropout, Method
from bayesify.models import lenet
from bayesify.posthoc.conformal import Conformal

log = logging.getLogger(__name__)

DATASETS = ("bostonHousing", "concrete", "energy")
METHOD_NAMES = ("mcbn", "mc-dropout")
SET_METHODS = {
    "APS": {"method": "aps"},
    "APS, randomized": {"method": "aps", "randomized": True},
    "RAPS (k_reg 1, λ 0.05)": {"method": "raps", "k_reg": 1, "lam": 0.05},
}


@dataclass(frozen=True)
class CoverageOptions:
    """Options of ``bayesify bench coverage``."""

    command: ClassVar[str] = "coverage"
    datasets: tuple[str, ...] = option(DATASETS, "Comma-separated UCI datasets.")
    methods: tuple[str, ...] = option(METHOD_NAMES, "Comma-separated, from mcbn, mc-dropout.")
    splits: int = option(20, "Gal's first splits per dataset.")
    epochs: int = option(40, "Training epochs, Gal & Ghahramani's 40 (best on validation kept).")
    samples: int = option(50, "MC samples T per UCI prediction.")
    calibration: float = option(
        0.67, "Share of each UCI validation part kept for conformal calibration."
    )
    level: float = option(0.9, "Nominal coverage of intervals and sets.")
    fmnist_train: int = option(5000, "Fashion-MNIST training images (0: skip Fashion-MNIST).")
    fmnist_pool: int = option(4000, "Held-out Fashion-MNIST images, split in calibration/test.")
    fmnist_epochs: int = option(2, "Fashion-MNIST training epochs.")
    fmnist_samples: int = option(20, "MC samples T per Fashion-MNIST prediction.")
    repeats: int = option(200, "Random calibration/test splits of the Fashion-MNIST pool.")
    out: str = option("benchmarks/coverage.md", "Markdown report.")

    def __post_init__(self) -> None:
        check_choices("datasets", self.datasets, DATASETS + ("wine-quality-red", "yacht"))
        check_choices("methods", self.methods, METHOD_NAMES)
        for name in ("level", "calibration"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{name} must be strictly between 0 and 1, got {value}")


@dataclass
class _Tally:
    """Covered rows and interval widths pooled over splits; per-split coverage for its spread."""

    covered: int = 0
    rows: int = 0
    width: float = 0.0
    per_split: list[float] | None = None

    def add(self, lo: torch.Tensor, hi: torch.Tensor, y: torch.Tensor) -> None:
        inside = (y >= lo) & (y <= hi)
        self.covered += int(inside.sum())
        self.rows += len(y)
        self.width += float((hi - lo).sum())
        self.per_split = [*(self.per_split or []), float(inside.double().mean())]

    def cell(self) -> str:
        cov = 100 * self.covered / self.rows
        v = torch.tensor(self.per_split, dtype=torch.float64)
        se = 100 * float(v.std() / math.sqrt(len(v))) if len(v) > 1 else 0.0
        return f"{cov:.1f} ± {se:.1f} | {self.width / self.rows:.2f}"


def _seeded(seed: int, make: Callable[[], Method]) -> Method:
    """``make()`` with its weight initialisation drawn from ``seed`` (the global RNG is left as
    it was), so every split's network is the same whatever ran before it."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return make()


def _uci_split(name: str, split: int, method: str, opts: CoverageOptions, tallies) -> None:
    data = load_uci(name, split, protocol="gal")
    cut = len(data.y_val) - round(opts.calibration * len(data.y_val))
    tune = (data.x_val[:cut], data.y_val[:cut])
    xc, yc = data.x_val[cut:], data.y_val[cut:]
    s = Settings(epochs=opts.epochs, samples=opts.samples)
    m = _seeded(split, lambda: build(method, data.n_features, s))
    m.fit((data.x_train, data.y_train), val=tune, epochs=s.epochs, batch_size=s.batch_size,
          lr=s.lr, seed=split, progress=False)  # fmt: skip
    units = (data.scaler.y_mean, data.scaler.y_std)
    pred_cal = m.predict(xc, samples=opts.samples, seed=split).affine(*units)
    pred = m.predict(data.x_test, samples=opts.samples, seed=split + 1000).affine(*units)
    y, y_cal = data.y_test_original, data.scaler.inverse_y(yc.double())
    tallies["mc"].add(*pred.interval(opts.level), y)
    conf = Conformal.fit(pred_cal, y_cal)
    tallies["conformal"].add(*conf.interval(pred, opts.level), y)


def _uci_rows(opts: CoverageOptions) -> list[str]:
    rows = []
    for name in opts.datasets:
        for method in opts.methods:
            tallies = {"mc": _Tally(), "conformal": _Tally()}
            for split in range(opts.splits):
                _uci_split(name, split, method, opts, tallies)
            log.info("%s %s: %s", name, method, {k: t.cell() for k, t in tallies.items()})
            rows.append(f"| {name} | {method} | {tallies['mc'].rows} | "
                        f"{tallies['mc'].cell()} | {tallies['conformal'].cell()} |")  # fmt: skip
    return rows


def _fmnist_rows(opts: CoverageOptions) -> tuple[list[str], str]:
    train = load_fashion_mnist("train").subset(opts.fmnist_train, seed=0)
    pool = load_fashion_mnist("test").subset(opts.fmnist_pool, seed=0)
    m = _seeded(0, lambda: MCDropout(lenet(norm="batch", dropout=0.5), task="classification"))
    m.fit((train.x, train.y), epochs=opts.fmnist_epochs, batch_size=64, lr=1e-3, seed=0,
          progress=False)  # fmt: skip
    pred = m.predict(pool.x, samples=opts.fmnist_samples, seed=1)
    y = pool.y
    accuracy = float((pred.predicted_class == y).double().mean())
    raw = pred.prediction_set(opts.level)
    rows = [
        f"| mean probability ≥ level (`Predictive.prediction_set`) | "
        f"{100 * float(raw[torch.arange(len(y)), y].double().mean()):.1f} | — | "
        f"{float(raw.sum(1).double().mean()):.2f} | — |"
    ]
    g = torch.Generator().manual_seed(0)
    n_cal = len(y) // 2
    for label, kw in SET_METHODS.items():
        cov, size, empty = [], [], []
        for _ in range(opts.repeats):
            perm = torch.randperm(len(y), generator=g)
            cal, test = perm[:n_cal], perm[n_cal:]
            conf = Conformal.fit(pred[cal], y[cal], generator=g, **kw)
            sets = conf.prediction_set(pred[test], opts.level, generator=g)
            cov.append(float(sets[torch.arange(len(test)), y[test]].double().mean()))
            size.append(float(sets.sum(1).double().mean()))
            empty.append(float((sets.sum(1) == 0).double().mean()))
        c = torch.tensor(cov, dtype=torch.float64)
        rows.append(
            f"| {label} | {100 * float(c.mean()):.1f} | {100 * float(c.std()):.1f} | "
            f"{sum(size) / len(size):.2f} | {100 * sum(empty) / len(empty):.1f} |"
        )
    note = (
        f"MC dropout LeNet (batch norm, p = 0.5 before the last layer), {opts.fmnist_epochs} "
        f"epochs on {opts.fmnist_train} training images (stratified, seed 0); test accuracy "
        f"{100 * accuracy:.1f}% on a pool of {len(y)} held-out test images (stratified, seed 0), "
        f"T = {opts.fmnist_samples}. Each of {opts.repeats} repeats calibrates on a random "
        f"{n_cal} of the pool and scores the other {len(y) - n_cal}; the guarantee for "
        f"n = {n_cal} is {100 * opts.level:.0f}% to "
        f"{100 * (opts.level + 1 / (n_cal + 1)):.2f}% on average."
    )
    return rows, note


def run(opts: CoverageOptions) -> str:
    """Every dataset and method; returns the markdown written to ``opts.out``."""
    torch.set_num_threads(1)
    start = time.time()
    uci = _uci_rows(opts) if opts.datasets and opts.methods else []
    fmnist, note = _fmnist_rows(opts) if opts.fmnist_train > 0 else ([], "(skipped)")
    minutes = (time.time() - start) / 60
    pct = f"{100 * opts.level:.0f}%"
    lines = [
        f"# Coverage of {pct} prediction intervals and sets on held-out data",
        "",
        f"Command: `{command_line(opts)}`  ",
        f"Machine: {platform.machine()} CPU, {platform.processor() or 'unknown'}, "
        f"torch {torch.__version__}, 1 thread (shared, loaded machine); {minutes:.1f} min.",
        "",
        f"## UCI regression: {pct} intervals",
        "",
        f"Gal's first {opts.splits} 90/10 splits; {Settings(epochs=opts.epochs)}, T = "
        f"{opts.samples}. The last 20% of each training split is validation: its first "
        f"{100 * (1 - opts.calibration):.0f}% picks the epoch and fits τ (mixture PLL), the "
        f"other {100 * opts.calibration:.0f}% calibrates the conformal intervals only. MC: the "
        "equal-tailed interval of the predictive mixture (`Predictive.interval`); conformal: "
        "`Conformal.fit(...).interval` (normalized scores |y − μ|/σ). Coverage in % pooled "
        "over all test rows ± standard error over splits; "
        "width: mean interval width in original target units.",
        "",
        "| dataset | method | test rows | MC coverage | MC width | conformal coverage "
        "| conformal width |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *uci,
        "",
        f"## Fashion-MNIST: {pct} prediction sets",
        "",
        note,
        "",
        "| set | coverage % (mean over repeats) | sd over repeats | mean size | empty sets % |",
        "| --- | --- | --- | --- | --- |",
        *fmnist,
        "",
    ]
    text = write_report(opts.out, "\n".join(lines))
    log.info("wrote %s", opts.out)
    return text
