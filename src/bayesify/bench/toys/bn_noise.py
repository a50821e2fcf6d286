"""How noisy is batch norm? (Shekhovtsov & Flach 2018, Fig. 4.)

In a trained BN network, draw random training mini-batches of size k as in training, record each
BN layer's batch mean M and (biased) variance S² (:meth:`bayesify.MCBN.fill_bank`), and compare
them with the population statistics μ, σ² (running statistics). Training-time BN equals test-time
BN up to an additive noise V = (μ − M)/σ and a multiplicative noise U = σ/S. With n = k·z values
per channel (z = spatial size) and i.i.d. Gaussian activations, V ~ N(0, 1/n) exactly, and for the
biased variance S² (divided by n, as BN computes it) nS²/σ² ~ χ²(n−1) — the χ²(n−1) law with
factor n−1 belongs to the unbiased variance. So U = √n / χ(n−1) = √n·χ⁻¹(n−1) exactly (χ⁻¹: the
inverse-chi distribution), with E[U²] = n/(n−3) and E[U] = √(n/2)·Γ((n−2)/2)/Γ((n−1)/2)
(:func:`exact_std_mult`). Its first-order approximation std(U) ≈ 1/√(2(n−1)) holds only for large
n: at n = 8 the exact std is 0.389, not 0.267, and var(U) falls faster than 1/n at small n.

    bayesify bench bn-noise --bundle /tmp/bayesify_bn_lenet --out benchmarks/bn_noise
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from scipy.special import gammaln

import bayesify
from bayesify.bench.machine import machine_description
from bayesify.bench.options import command_line, option, write_report
from bayesify.data import load_fashion_mnist
from bayesify.train import Data

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BNNoiseOptions:
    """Options of ``bayesify bench bn-noise``."""

    command: ClassVar[str] = "bn-noise"
    bundle: str = option(
        "/tmp/bayesify_bn_lenet", "BN LeNet bundle, as saved by `bayesify bench mcbn-collapse`."
    )
    out: str = option("benchmarks/bn_noise", "Folder for README.md and the figure.")
    n_train: int = option(10000, "Training images to draw batches from.")
    batch_sizes: tuple[int, ...] = option(
        (8, 16, 32, 64, 128, 256), "Batch sizes k, comma-separated."
    )
    repeats: int = option(64, "Random mini-batches per batch size.")
    seed: int = option(0, "Seed for the subset and the batches.")


def exact_std_mult(n: int) -> float:
    """std of U = σ/S for n i.i.d. Gaussian values, S² the biased variance: U = √n·χ⁻¹(n−1).

    With X ~ χ(m), m = n − 1: E[1/X²] = 1/(m − 2) and E[1/X] = Γ((m−1)/2) / (√2·Γ(m/2)), so
    Var(U) = n·(1/(m−2) − E[1/X]²). Infinite for n ≤ 3 (the second moment does not exist).
    """
    m = n - 1
    if m <= 2:
        return math.inf
    e_inv = math.exp(gammaln((m - 1) / 2) - gammaln(m / 2)) / math.sqrt(2.0)
    return math.sqrt(n * (1.0 / (m - 2) - e_inv**2))


def first_order_std_mult(n: int) -> float:
    """The delta-method approximation 1/√(2(n−1)) of :func:`exact_std_mult` (large n)."""
    return 1.0 / math.sqrt(2.0 * max(n - 1, 1))


@dataclass(frozen=True)
class BNNoise:
    """Per layer and batch size: spatial size z, and the std of U and V averaged over channels."""

    layer: int
    batch_size: int
    spatial: int
    std_mult: float  # std over batches of U = σ/S, mean over channels
    std_add: float  # std over batches of V = (μ − M)/σ, mean over channels

    @property
    def n(self) -> int:
        return self.batch_size * self.spatial

    @property
    def model_std_mult(self) -> float:
        """The exact law's std of U (:func:`exact_std_mult`)."""
        return exact_std_mult(self.n)

    @property
    def first_order_std_mult(self) -> float:
        return first_order_std_mult(self.n)

    @property
    def model_std_add(self) -> float:
        return 1.0 / math.sqrt(self.n)


def measure_bn_noise(
    method: bayesify.MCBN,
    train: Data,
    batch_sizes: tuple[int, ...] = (8, 16, 32, 64, 128, 256),
    *,
    repeats: int = 64,
    seed: int = 0,
) -> list[BNNoise]:
    """Standard deviations of BN's multiplicative and additive noise per layer and batch size.

    Uses ``repeats`` random mini-batches per batch size; leaves the method's weights and
    running statistics unchanged (its bank is overwritten)."""
    out: list[BNNoise] = []
    for k in batch_sizes:
        method.fill_bank(train, batch_size=k, bank_size=repeats, seed=seed)
        for i, layer in enumerate(method.layers):
            mu, var = layer.running_mean, layer.running_var  # [C]
            m, s2 = layer.bank_mean, layer.bank_var  # [R, C]
            u = (var / s2.clamp_min(1e-12)).sqrt()  # σ / S
            v = (mu - m) / var.sqrt()
            keep = var > 1e-6  # dead channels have no noise to speak of
            out.append(
                BNNoise(
                    layer=i,
                    batch_size=k,
                    spatial=int(layer.spatial_size),
                    std_mult=float(u.std(0)[keep].mean()),
                    std_add=float(v.std(0)[keep].mean()),
                )
            )
            log.info("%s", out[-1])
    return out


def run(opts: BNNoiseOptions) -> str:
    """Measure, plot, write ``out/README.md``; returns its markdown."""
    torch.set_num_threads(1)
    method = bayesify.load(opts.bundle)
    data = load_fashion_mnist("train").subset(opts.n_train, seed=opts.seed)
    rows = measure_bn_noise(
        method, (data.x, data.y), opts.batch_sizes, repeats=opts.repeats, seed=opts.seed
    )
    lines = [
        "# Batch-norm noise vs batch size (Shekhovtsov & Flach 2018, Fig. 4)",
        "",
        f"Command: `{command_line(opts)}`  ",
        f"Machine: {machine_description()}.  ",
        f"Network: the BN LeNet trained by `bayesify bench mcbn-collapse` (bundle {opts.bundle}); "
        f"{opts.repeats} random mini-batches from {opts.n_train} Fashion-MNIST training images "
        "per batch size k. U = σ/S (multiplicative), V = (μ − M)/σ (additive); std over batches, "
        "mean over channels; model: i.i.d. Gaussian activations, n = k·z, exact law "
        "U = √n·χ⁻¹(n−1) (biased S²), V ~ N(0, 1/n); the first-order 1/√(2(n−1)) for comparison.",
        "",
        "| layer | spatial z | k | n = k·z | std U | exact √n·χ⁻¹(n−1) | first order "
        "1/√(2(n−1)) | std V | model 1/√n |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in sorted(rows, key=lambda r: (r.layer, r.batch_size)):
        lines.append(
            f"| {r.layer} | {r.spatial} | {r.batch_size} | {r.n} | {r.std_mult:.4f} "
            f"| {r.model_std_mult:.4f} | {r.first_order_std_mult:.4f} | {r.std_add:.4f} "
            f"| {r.model_std_add:.4f} |"
        )
    slopes = _slopes(rows)
    model = _slopes(rows, model=True)
    lines += [
        "",
        "Log-log slope of var(U) and var(V) against k per layer, measured and under the exact "
        "law (the first-order law predicts −1 for both):",
        "",
        "| layer | slope var(U) | exact law | slope var(V) | exact law |",
        "| ---: | ---: | ---: | ---: | ---: |",
        *[
            f"| {i} | {su:.2f} | {model[i][0]:.2f} | {sv:.2f} | {model[i][1]:.2f} |"
            for i, (su, sv) in slopes.items()
        ],
        "",
        "![BN noise vs batch size](bn_noise.png)",
        "",
    ]
    Path(opts.out).mkdir(parents=True, exist_ok=True)
    _plot(rows, Path(opts.out) / "bn_noise.png")
    return write_report(Path(opts.out) / "README.md", "\n".join(lines))


def _slopes(rows: list[BNNoise], *, model: bool = False) -> dict[int, tuple[float, float]]:
    """Least-squares log-log slope of var(U), var(V) against k per layer (measured, or the
    exact law's with ``model``)."""
    out = {}
    for i in sorted({r.layer for r in rows}):
        rs = [r for r in rows if r.layer == i]
        lk = torch.tensor([math.log(r.batch_size) for r in rs])
        fits = []
        mult = [r.model_std_mult if model else r.std_mult for r in rs]
        add = [r.model_std_add if model else r.std_add for r in rs]
        for vals in (mult, add):
            lv = torch.tensor([2 * math.log(v) for v in vals])
            lkc = lk - lk.mean()
            fits.append(float((lkc * (lv - lv.mean())).sum() / lkc.pow(2).sum()))
        out[i] = (fits[0], fits[1])
    return out


def _plot(rows: list[BNNoise], path: Path) -> None:
    from bayesify.plots import new_figure, save_figure

    fig, ax = new_figure(nrows=1, ncols=2, figsize=(8.5, 3.4))
    for i in sorted({r.layer for r in rows}):
        rs = sorted((r for r in rows if r.layer == i), key=lambda r: r.n)
        n = [r.n for r in rs]
        (line,) = ax[0].plot(n, [r.std_mult**2 for r in rs], "o-", label=f"layer {i}")
        ax[0].plot(n, [r.model_std_mult**2 for r in rs], ":", color=line.get_color())
        ax[1].plot(n, [r.std_add**2 for r in rs], "o-", color=line.get_color())
        ax[1].plot(n, [r.model_std_add**2 for r in rs], ":", color=line.get_color())
    ax[0].set(xscale="log", yscale="log", xlabel="n = batch × spatial", ylabel="var U = σ/S")
    ax[1].set(xscale="log", yscale="log", xlabel="n = batch × spatial", ylabel="var V")
    ax[0].legend(fontsize=7, title="measured; dotted: model", title_fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
