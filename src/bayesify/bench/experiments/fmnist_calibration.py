"""Fashion-MNIST calibration: error, NLL and ECE per method, before and after temperature scaling.

A LeNet-style CNN (batch norm; dropout 0.5 before the last layer for MC dropout) trained a few
epochs on a stratified subset of the training images on CPU; the temperature is fitted on a
held-out validation subset, scores are on (a subset of) the test set.

    bayesify bench fmnist-calibration --train 5000 --epochs 2
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import ClassVar

import torch

from bayesify.bench.machine import machine_description
from bayesify.bench.options import check_choices, command_line, option, write_report
from bayesify.data import load_fashion_mnist
from bayesify.methods import MCBN, BayesByBackprop, DeepEnsemble, Deterministic, MCDropout
from bayesify.metrics import error_rate, expected_calibration_error, nll
from bayesify.models import lenet
from bayesify.posthoc.recalibration import apply_temperature, fit_temperature

log = logging.getLogger(__name__)

METHOD_NAMES = ("deterministic", "mc-dropout", "mcbn", "bbb", "ensemble")


@dataclass(frozen=True)
class FMNISTCalibrationOptions:
    """Options of ``bayesify bench fmnist-calibration``."""

    command: ClassVar[str] = "fmnist-calibration"
    train: int = option(5000, "Training subset size.")
    val: int = option(1000, "Validation images (temperature fit).")
    test: int = option(2000, "Test images (stratified subset).")
    epochs: int = option(2, "Training epochs per method.")
    samples: int = option(20, "MC samples T per prediction.")
    members: int = option(3, "Deep-ensemble members.")
    methods: tuple[str, ...] = option(
        METHOD_NAMES, f"Comma-separated, from {', '.join(METHOD_NAMES)}."
    )
    out: str = option("benchmarks/fmnist_calibration.md", "Markdown report.")
    png: str = option("benchmarks/fmnist_reliability.png", "Reliability diagrams.")

    def __post_init__(self) -> None:
        check_choices("methods", self.methods, METHOD_NAMES)


def build(method: str, members: int):
    """The method on a fresh LeNet."""
    opts = {"task": "classification"}
    if method == "deterministic":
        return Deterministic(lenet(norm="batch"), **opts)
    if method == "mc-dropout":
        return MCDropout(lenet(norm="batch", dropout=0.5), **opts)
    if method == "mcbn":
        return MCBN(lenet(norm="batch"), bank_size=64, **opts)
    if method == "bbb":  # hybrid: the last two (fully connected) layers are Bayesian
        return BayesByBackprop(lenet(norm="batch"), last_k=2, init_rho=-6.0, **opts)
    if method == "ensemble":
        return DeepEnsemble(lenet(norm="batch"), members=members, **opts)
    raise ValueError(f"unknown method {method!r}")


def run(opts: FMNISTCalibrationOptions) -> str:
    """Train and score every method, write the report and the figure; returns the markdown."""
    from bayesify.plots.calibration import reliability_diagram  # matplotlib: only when run

    torch.set_num_threads(1)
    start = time.time()
    full = load_fashion_mnist("train")
    pool = full.subset(opts.train + opts.val, seed=0)
    perm = torch.randperm(len(pool), generator=torch.Generator().manual_seed(0))
    tr, va = perm[: opts.train], perm[opts.train :]
    x, y, xv, yv = pool.x[tr], pool.y[tr], pool.x[va], pool.y[va]
    test = load_fashion_mnist("test").subset(opts.test, seed=0)
    rows, scaled_preds = [], {}
    for method in opts.methods:
        m = build(method, opts.members)
        m.fit((x, y), epochs=opts.epochs, batch_size=64, lr=1e-3, seed=0, progress=False)
        pv = m.predict(xv, samples=opts.samples, seed=1)
        pt = m.predict(test.x, samples=opts.samples, seed=2)
        t = fit_temperature(pv, yv)
        pts = apply_temperature(pt, t)
        scores = [
            f(q.mean, test.y).item()
            for q in (pt, pts)
            for f in (error_rate, nll, expected_calibration_error)
        ]
        log.info("%s: T=%.3f scores=%s", method, t, scores)
        rows.append(f"| {method} | " + " | ".join(f"{v:.4f}" for v in scores) + f" | {t:.3f} |")
        scaled_preds[method] = pt
        scaled_preds[f"{method}+TS"] = pts
    fig_preds = {k: v for k, v in scaled_preds.items() if not k.startswith("deterministic+")}
    reliability_diagram(fig_preds, test.y, path=opts.png, dpi=45)
    minutes = (time.time() - start) / 60
    lines = [
        "# Fashion-MNIST calibration before and after temperature scaling",
        "",
        f"Command: `{command_line(opts)}`  ",
        f"Machine: {machine_description()}; {minutes:.1f} min.  ",
        f"Data: stratified subset of {opts.train} training images (seed 0), {opts.val} "
        f"validation images (temperature fit), {opts.test} test images (stratified subset).  ",
        f"Model: LeNet-style CNN with batch norm, {opts.epochs} epochs, Adam 1e-3, batch 64; "
        f"{opts.samples} MC samples; MC dropout p = 0.5 before the last layer; BBB on the last "
        f"two layers; ensemble of {opts.members} members. Short CPU training: absolute errors "
        "are far from converged numbers.",
        "",
        "| method | error | NLL | ECE | error (TS) | NLL (TS) | ECE (TS) | T |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        f"Reliability diagrams (15 bins, per-bin counts below): `{opts.png}`.",
        "",
    ]
    text = write_report(opts.out, "\n".join(lines))
    log.info("wrote %s", opts.out)
    return text
