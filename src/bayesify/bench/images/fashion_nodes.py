"""Fashion-MNIST with a LeNet-style CNN on CPU: IBNN, IBNN from a pretrained net,
StochasticNorm, weight normalisation without noise, a deterministic net and MCBN.

Reports test error, NLL and ECE, and validation NLL (the predictive mixture), as markdown.

    bayesify bench fashion-nodes --out benchmarks/fashion_nodes
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

import bayesify
from bayesify.bench.machine import machine_description
from bayesify.bench.options import command_line, option, write_report
from bayesify.data import load_fashion_mnist
from bayesify.metrics import error_rate, expected_calibration_error, nll
from bayesify.models import lenet
from bayesify.seeding import seeded

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FashionNodesOptions:
    """Options of ``bayesify bench fashion-nodes``."""

    command: ClassVar[str] = "fashion-nodes"
    out: str = option("benchmarks/fashion_nodes", "Folder for README.md.")
    n_train: int = option(10000, "Training images (stratified subset).")
    n_val: int = option(2000, "Validation images (from the train file).")
    n_test: int = option(2000, "Test images (stratified subset).")
    epochs: int = option(3, "Training epochs per method.")
    pretrained_epochs: int = option(1, "Epochs of IBNN node-posterior learning from pretrained.")
    batch_size: int = option(64, "Mini-batch size (and MCBN's b).")
    components: int = option(4, "IBNN mixture components K.")
    samples: int = option(20, "MC samples T per prediction.")
    seed: int = option(0, "Seed for subsets, weights and sampling.")


def evaluate(method: bayesify.Method, x, y, samples: int, seed: int) -> dict[str, float]:
    """Error, NLL and ECE of the MC predictive (mean of T sample probabilities)."""
    p = method.predict(x, samples=samples, seed=seed).mean  # [N, C]
    return {
        "error": float(error_rate(p, y)),
        "nll": float(nll(p, y)),
        "ece": float(expected_calibration_error(p, y)),
    }


def run(opts: FashionNodesOptions) -> str:
    """Train and score every method, write ``out/README.md``; returns its markdown."""
    torch.set_num_threads(1)
    data = load_fashion_mnist("train").subset(opts.n_train + opts.n_val, seed=opts.seed)
    train = (data.x[: opts.n_train], data.y[: opts.n_train])
    val = (data.x[opts.n_train :], data.y[opts.n_train :])
    test = load_fashion_mnist("test").subset(opts.n_test, seed=opts.seed)
    fit = {"epochs": opts.epochs, "batch_size": opts.batch_size, "lr": 1e-3, "seed": opts.seed}
    cls = {"task": "classification"}
    k = opts.components

    def build(name: str) -> bayesify.Method:
        with seeded(opts.seed):  # the same initial weights for every model of a kind
            return make(name)

    def make(name: str) -> bayesify.Method:
        if name == "deterministic":
            return bayesify.Deterministic(lenet(norm=None), **cls)
        if name == f"IBNN (K={k})":
            return bayesify.IBNN(lenet(norm=None), components=k, **ibnn_opts, **cls)
        if name == "StochasticNorm":
            return bayesify.StochasticNorm(lenet(norm=None), **cls)
        if name == "weight norm, no noise":
            return bayesify.StochasticNorm(lenet(norm=None), noise="none", **cls)
        if name == "MCBN":
            return bayesify.MCBN(lenet(norm="batch"), bank_size=opts.samples, **cls)
        raise KeyError(name)

    ibnn_opts = {
        "train_samples": 2,
        "mu_init_std": 0.1,
        "sigma_init": 0.05,
        "prior_std": 0.3,
        "variational_lr": 1e-2,
    }
    names = ["deterministic", f"IBNN (K={k})", "StochasticNorm", "weight norm, no noise", "MCBN"]
    rows: dict[str, tuple[dict, dict, float]] = {}
    det_net = None
    for name in names:
        t0 = time.time()
        method = build(name).fit(train, **fit, progress=False)
        if name == "deterministic":
            det_net = copy.deepcopy(method.net)
        rows[name] = _scores(method, val, test, opts, time.time() - t0)
        log.info("%s: %s", name, rows[name])
    t0 = time.time()
    pre = bayesify.IBNN.from_pretrained(
        det_net,
        train,
        epochs=opts.pretrained_epochs,
        batch_size=opts.batch_size,
        components=k,
        seed=opts.seed,
        **ibnn_opts,
        **cls,
    )
    rows[f"IBNN (K={k}) from pretrained"] = _scores(pre, val, test, opts, time.time() - t0)

    lines = [
        "# Fashion-MNIST, LeNet-style CNN: node- and normalisation-based methods",
        "",
        f"Command: `{command_line(opts)}`  ",
        f"Machine: {machine_description()}.  ",
        f"Setup: stratified subset of {opts.n_train} training images, {opts.n_val} validation "
        f"images (also from the training file), {opts.n_test} test images; {opts.epochs} epochs, "
        f"batch {opts.batch_size}, Adam lr 1e-3, seed {opts.seed}; T = {opts.samples} MC samples "
        f"(IBNN: {opts.samples // k} per component). IBNN: K = {k}, S = 2, μ ~ N(1, 0.1²), "
        "σ₀ = 0.05, prior N(1, 0.3²), variational lr 1e-2, β annealed over the first half; "
        f"from pretrained: the deterministic net's weights frozen, {opts.pretrained_epochs} "
        "epoch(s) of node-posterior learning. StochasticNorm: learned per-channel σ, prior "
        "N(1, 10²), projection ‖w‖ = 1 after every step. MCBN: BN LeNet, bank of T mini-batches "
        f"of {opts.batch_size}. NLL: of the mean predictive; ECE: 15 bins.",
        "",
        "| method | test error | test NLL | test ECE | val NLL | train+eval s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, (te, va, secs) in rows.items():
        lines.append(
            f"| {name} | {te['error']:.4f} | {te['nll']:.4f} | {te['ece']:.4f} "
            f"| {va['nll']:.4f} | {secs:.0f} |"
        )
    return write_report(Path(opts.out) / "README.md", "\n".join(lines) + "\n")


def _scores(method, val, test, opts, secs) -> tuple[dict, dict, float]:
    noiseless = isinstance(method, bayesify.Deterministic) or (
        isinstance(method, bayesify.StochasticNorm) and method.config.noise.value == "none"
    )
    t = 1 if noiseless else opts.samples
    te = evaluate(method, test.x, test.y, t, opts.seed)
    va = evaluate(method, val[0], val[1], t, opts.seed)
    return te, va, secs
