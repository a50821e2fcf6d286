"""MCBN's uncertainty collapse with large batches (Mukhoti et al. 2020, Fig. 1), and its fix.

Train a batch-norm LeNet on Fashion-MNIST; then for MCBN batch sizes b = 16 … 1024 fill the
statistics bank with mini-batches of b and measure mutual information on Fashion-MNIST test
(in-distribution) and MNIST test (OOD), and the OOD AUROC of MI. Side by side: the Gaussian
statistics model at the same b, and at the b chosen on validation data by
:func:`~bayesify.methods.mcbn.tuning.tune_effective_batch_size`.

With ``--retrain`` (the default) also Mukhoti et al.'s own protocol: a fresh network trained
at each b, and MCBN run at that same b (Teye et al.'s rule: prediction batches as large as the
training batches). Every b gets the same epochs; Adam's learning rate grows as √(b/32) so the
fewer steps of a large batch still train the network (the test error column shows how well).

    bayesify bench mcbn-collapse --out benchmarks/mcbn_collapse
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

import bayesify
from bayesify.bench.machine import machine_description
from bayesify.bench.options import command_line, option, write_report
from bayesify.data import load_fashion_mnist, load_mnist
from bayesify.methods.mcbn.tuning import tune_effective_batch_size
from bayesify.metrics import auroc, error_rate
from bayesify.models import lenet
from bayesify.seeding import seeded

log = logging.getLogger(__name__)

BATCH_SIZES = (16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class MCBNCollapseOptions:
    """Options of ``bayesify bench mcbn-collapse``."""

    command: ClassVar[str] = "mcbn-collapse"
    out: str = option("benchmarks/mcbn_collapse", "Folder for README.md and the figure.")
    n_train: int = option(10000, "Fashion-MNIST training images.")
    n_val: int = option(1000, "Validation images for tuning b.")
    n_test: int = option(1000, "Test images, in-distribution and OOD.")
    epochs: int = option(3, "Training epochs.")
    batch_size: int = option(32, "Training mini-batch size.")
    samples: int = option(16, "MC samples T (and MCBN bank size).")
    seed: int = option(0, "Seed for subsets, weights and sampling.")
    bundle: str = option(
        "/tmp/bayesify_bn_lenet", "Save the BN net here (for `bench bn-noise`); empty: do not save."
    )
    retrain: bool = option(True, "Also train a network at each b (Mukhoti et al.'s protocol).")

    def __post_init__(self) -> None:
        for name in ("n_train", "n_val", "n_test", "epochs", "batch_size", "samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")


def retrain_lr(b: int, base: float = 1e-3, base_batch: int = 32) -> float:
    """Adam's learning rate for training batch size ``b``: ``base · √(b / base_batch)``."""
    return base * (b / base_batch) ** 0.5


def ood_scores(method: bayesify.MCBN, x_in, x_out, samples: int, seed: int) -> dict[str, float]:
    """Mean MI in / out, OOD AUROC of MI, and in-distribution predictive for error."""
    p_in = method.predict(x_in, samples=samples, seed=seed)
    p_out = method.predict(x_out, samples=samples, seed=seed)
    mi_in, mi_out = p_in.mutual_information, p_out.mutual_information
    return {
        "mi_in": float(mi_in.mean()),
        "mi_out": float(mi_out.mean()),
        "auroc": float(auroc(mi_in, mi_out)),
        "_pred": p_in,
    }


def run(opts: MCBNCollapseOptions) -> str:
    """Train, measure, plot, write ``out/README.md``; returns its markdown."""
    torch.set_num_threads(1)
    train = load_fashion_mnist("train").subset(opts.n_train + opts.n_val, seed=opts.seed)
    xt, yt = train.x[: opts.n_train], train.y[: opts.n_train]
    xv, yv = train.x[opts.n_train :], train.y[opts.n_train :]
    test = load_fashion_mnist("test").subset(opts.n_test, seed=opts.seed)
    ood = load_mnist("test").subset(opts.n_test, seed=opts.seed)

    t0 = time.time()
    with seeded(opts.seed):
        net = lenet(norm="batch")
    method = bayesify.MCBN(net, task="classification", bank_size=opts.samples)
    method.fit((xt, yt), epochs=opts.epochs, batch_size=opts.batch_size, lr=1e-3, seed=opts.seed)
    log.info("trained in %.0fs", time.time() - t0)
    out = Path(opts.out)
    if opts.bundle:
        method.save(opts.bundle, overwrite=True)  # reused by `bayesify bench bn-noise`

    sizes = [b for b in BATCH_SIZES if b <= opts.n_train]  # a bank batch needs b training rows
    rows = []
    for b in sizes:
        method.fill_bank((xt, yt), batch_size=b, bank_size=opts.samples, seed=opts.seed)
        bank = ood_scores(method, test.x, ood.x, opts.samples, opts.seed)
        gauss = bayesify.MCBN(method.net, task="classification", statistics="gaussian")
        gauss.set_effective_batch_size(b)
        g = ood_scores(gauss, test.x, ood.x, opts.samples, opts.seed)
        err = float(error_rate(bank.pop("_pred").mean, test.y))
        g.pop("_pred")
        rows.append((b, bank, g, err))
        log.info("b=%d bank %s gaussian %s", b, bank, g)

    retrained = []
    for b in sizes if opts.retrain else ():
        t0 = time.time()
        with seeded(opts.seed):
            net_b = lenet(norm="batch")
        m_b = bayesify.MCBN(net_b, task="classification", bank_size=opts.samples)
        m_b.fit((xt, yt), epochs=opts.epochs, batch_size=b, lr=retrain_lr(b), seed=opts.seed,
                progress=False)  # fmt: skip
        sc = ood_scores(m_b, test.x, ood.x, opts.samples, opts.seed)  # bank of b: as trained
        err = float(error_rate(sc.pop("_pred").mean, test.y))
        retrained.append((b, sc, err, time.time() - t0))
        log.info("retrained at b=%d: %s error %.3f", b, sc, err)

    gauss = bayesify.MCBN(method.net, task="classification", statistics="gaussian")
    grid = np.geomspace(1.5, 2048, 16)
    scores = tune_effective_batch_size(gauss, (xv, yv), grid, samples=opts.samples, seed=opts.seed)
    b_star = gauss.effective_batch_size
    tuned = ood_scores(gauss, test.x, ood.x, opts.samples, opts.seed)
    tuned_err = float(error_rate(tuned.pop("_pred").mean, test.y))
    det = method.net.eval()
    with torch.no_grad():
        det_err = float(error_rate(torch.softmax(det(test.x), -1), test.y))

    lines = [
        "# MCBN collapse with batch size, and the Gaussian model with tuned n",
        "",
        f"Command: `{command_line(opts)}`  ",
        f"Machine: {machine_description()}.  ",
        f"Setup: LeNet (BN) trained on {opts.n_train} Fashion-MNIST images, {opts.epochs} epochs, "
        f"batch {opts.batch_size}, Adam 1e-3; {opts.n_test} Fashion-MNIST test images "
        f"(in-distribution) vs {opts.n_test} MNIST test images (OOD); T = {opts.samples} samples; "
        f"MCBN bank of {opts.samples} mini-batches of size b. Deterministic (running-stats) test "
        f"error {det_err:.3f}. AUROC: MI as OOD score.",
        "",
        "| b | bank: MI in | bank: MI out | bank: AUROC | Gaussian: MI in | Gaussian: MI out "
        "| Gaussian: AUROC | bank test error |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for b, bank, g, err in rows:
        lines.append(
            f"| {b} | {bank['mi_in']:.4f} | {bank['mi_out']:.4f} | {bank['auroc']:.3f} "
            f"| {g['mi_in']:.4f} | {g['mi_out']:.4f} | {g['auroc']:.3f} | {err:.3f} |"
        )
    lines += [
        "",
        f"**Batch size chosen on {opts.n_val} validation images** (Gaussian model, max validation "
        f"log-likelihood over a geometric grid 1.5…2048): b* = {b_star:.3g}. "
        f"MI in {tuned['mi_in']:.4f}, MI out {tuned['mi_out']:.4f}, "
        f"**AUROC {tuned['auroc']:.3f}**, test error {tuned_err:.3f}.",
        "",
        "| grid b | validation log-likelihood |",
        "| ---: | ---: |",
        *[f"| {b:.3g} | {ll:.4f} |" for b, ll in scores.items()],
    ]
    if retrained:
        lines += [
            "",
            "**Retrained at each b** (Mukhoti et al.'s protocol): a fresh network trained with "
            f"batch size b for {opts.epochs} epochs, Adam with learning rate 1e-3·√(b/32), and "
            "MCBN at that b (bank of mini-batches of b, as fit() fills it).",
            "",
            "| b | lr | MI in | MI out | AUROC | test error | train + score s |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            *[
                f"| {b} | {retrain_lr(b):.2g} | {sc['mi_in']:.4f} | {sc['mi_out']:.4f} "
                f"| {sc['auroc']:.3f} | {err:.3f} | {secs:.0f} |"
                for b, sc, err, secs in retrained
            ],
        ]
    out.mkdir(parents=True, exist_ok=True)
    _plot(rows, b_star, tuned, out / "mcbn_collapse.png", retrained)
    lines += ["", "![MI and AUROC vs batch size](mcbn_collapse.png)", ""]
    return write_report(out / "README.md", "\n".join(lines))


def _plot(rows, b_star, tuned, path: Path, retrained=()) -> None:
    from bayesify.plots import new_figure, save_figure

    bs = [r[0] for r in rows]
    fig, ax = new_figure(nrows=1, ncols=2, figsize=(9, 3.4))
    ax[0].plot(bs, [r[1]["mi_in"] for r in rows], "o-", label="bank, F-MNIST (in)")
    ax[0].plot(bs, [r[1]["mi_out"] for r in rows], "o-", label="bank, MNIST (OOD)")
    ax[0].plot(bs, [r[2]["mi_in"] for r in rows], "s--", label="Gaussian, in")
    ax[0].plot(bs, [r[2]["mi_out"] for r in rows], "s--", label="Gaussian, OOD")
    if retrained:
        rb = [r[0] for r in retrained]
        ax[0].plot(rb, [r[1]["mi_in"] for r in retrained], "^:", label="retrained at b, in")
        ax[0].plot(rb, [r[1]["mi_out"] for r in retrained], "^:", label="retrained at b, OOD")
        ax[1].plot(rb, [r[1]["auroc"] for r in retrained], "^:", label="retrained at b")
    ax[0].set(xscale="log", yscale="log", xlabel="MCBN batch size b", ylabel="mean MI (nats)")
    ax[0].legend(fontsize=7)
    ax[1].plot(bs, [r[1]["auroc"] for r in rows], "o-", label="bank")
    ax[1].plot(bs, [r[2]["auroc"] for r in rows], "s--", label="Gaussian")
    ax[1].axhline(tuned["auroc"], color="k", lw=0.8, label=f"Gaussian, tuned b*={b_star:.3g}")
    ax[1].set(xscale="log", xlabel="MCBN batch size b", ylabel="OOD AUROC (MI)")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
