"""Fashion-MNIST calibration: error, NLL and ECE per method, before and after temperature scaling.

A LeNet-style CNN (batch norm; dropout 0.5 before the last layer for MC dropout) trained a few
epochs on a stratified subset of the training images on CPU; the temperature is fitted on a
held-out validation subset, scores are on (a subset of) the test set.

    python -m bayesify.bench.fmnist_calibration --train 5000 --epochs 2
"""

from __future__ import annotations

import argparse
import logging
import platform
import sys
import time

import torch

from bayesify.calibration import apply_temperature, fit_temperature
from bayesify.data import load_fashion_mnist
from bayesify.methods import MCBN, BayesByBackprop, DeepEnsemble, Deterministic, MCDropout
from bayesify.metrics import error_rate, expected_calibration_error, nll
from bayesify.models import lenet
from bayesify.plots_calibration import reliability_diagram

log = logging.getLogger(__name__)


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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", type=int, default=5000, help="training subset size")
    p.add_argument("--val", type=int, default=1000)
    p.add_argument("--test", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--members", type=int, default=3)
    p.add_argument(
        "--methods", nargs="*", default=["deterministic", "mc-dropout", "mcbn", "bbb", "ensemble"]
    )
    p.add_argument("--out", default="benchmarks/fmnist_calibration.md")
    p.add_argument("--png", default="benchmarks/fmnist_reliability.png")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    start = time.time()
    full = load_fashion_mnist("train")
    pool = full.subset(args.train + args.val, seed=0)
    perm = torch.randperm(len(pool), generator=torch.Generator().manual_seed(0))
    tr, va = perm[: args.train], perm[args.train :]
    x, y, xv, yv = pool.x[tr], pool.y[tr], pool.x[va], pool.y[va]
    test = load_fashion_mnist("test").subset(args.test, seed=0)
    rows, scaled_preds = [], {}
    for method in args.methods:
        m = build(method, args.members)
        m.fit((x, y), epochs=args.epochs, batch_size=64, lr=1e-3, seed=0, progress=False)
        pv = m.predict(xv, samples=args.samples, seed=1)
        pt = m.predict(test.x, samples=args.samples, seed=2)
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
    reliability_diagram(fig_preds, test.y, path=args.png, dpi=45)
    minutes = (time.time() - start) / 60
    cmd = "python -m bayesify.bench.fmnist_calibration " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    lines = [
        "# Fashion-MNIST calibration before and after temperature scaling",
        "",
        f"Command: `{cmd}`  ",
        f"Machine: {platform.machine()} CPU, torch {torch.__version__}, 1 thread (shared, "
        f"loaded machine); {minutes:.1f} min.  ",
        f"Data: stratified subset of {args.train} training images (seed 0), {args.val} "
        f"validation images (temperature fit), {args.test} test images (stratified subset).  ",
        f"Model: LeNet-style CNN with batch norm, {args.epochs} epochs, Adam 1e-3, batch 64; "
        f"{args.samples} MC samples; MC dropout p = 0.5 before the last layer; BBB on the last "
        f"two layers; ensemble of {args.members} members. Short CPU training: absolute errors "
        "are far from converged numbers.",
        "",
        "| method | error | NLL | ECE | error (TS) | NLL (TS) | ECE (TS) | T |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        f"Reliability diagrams (15 bins, per-bin counts below): `{args.png}`.",
        "",
    ]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
