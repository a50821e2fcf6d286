"""VBLL against the plain network and a 4-member DeepEnsemble, measured side by side in one run:
the cost of one prediction per 1,000 rows, and Fashion-MNIST → MNIST out-of-distribution AUROC.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/vbll.py

Cost: the three methods on UCI yacht (teye split 0, MLP 50-50 without batch norm, trained
``--epochs`` epochs), ``method.sample`` on the test rows repeated to 1,000 rows with each
method's own T (plain 1, ensemble 4 members, VBLL ``--samples``); the calls alternate in a
rotating order after a warm-up round; times are medians.

OOD: a LeNet (batch norm) trained ``--ood-epochs`` epochs on ``--ood-train`` Fashion-MNIST training
rows, plain and VBLL from the same initial weights and batch order (one seed); AUROC of the
predictive entropy and of the mutual information on ``--ood-rows`` Fashion-MNIST test rows
against as many MNIST test rows.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

import bayesify
from bayesify.metrics.ood import auroc
from bayesify.models import lenet, mlp


def _cost(args: argparse.Namespace) -> None:
    from bayesify.data.uci import load_uci

    split = load_uci("yacht", 0, protocol="teye")
    d = split.x_train.shape[1]
    fit = {"epochs": args.epochs, "batch_size": 32, "progress": False}
    val = (split.x_test[:20], split.y_test[:20])
    methods: dict[str, tuple[Any, int]] = {}
    for name, build, t in (
        ("plain", lambda: bayesify.Deterministic(mlp(d, 1, (50, 50), norm=None)), 1),
        ("ensemble-4", lambda: bayesify.DeepEnsemble(mlp(d, 1, (50, 50), norm=None), members=4), 4),
        ("vbll", lambda: bayesify.VBLL(mlp(d, 1, (50, 50), norm=None)), args.samples),
    ):
        torch.manual_seed(0)
        t0 = time.perf_counter()
        m = build().fit((split.x_train, split.y_train), val=val, **fit)
        print(f"{name}: trained in {time.perf_counter() - t0:.1f} s")
        methods[name] = (m, t)
    x = split.x_test.repeat(1000 // len(split.x_test) + 1, 1)[:1000]
    times: dict[str, list[float]] = {k: [] for k in methods}
    names = list(methods)
    with torch.no_grad():
        for r in range(args.repeats + 1):
            for k in names[r % 3 :] + names[: r % 3]:
                m, t = methods[k]
                t0 = time.perf_counter()
                m.sample(x, t, seed=0)
                if r:  # round 0 warms up
                    times[k].append(time.perf_counter() - t0)
    base = statistics.median(times["plain"])
    print("\n| method | T | ms per 1,000 rows | ratio to plain |")
    print("| --- | ---: | ---: | ---: |")
    for k in names:
        med = statistics.median(times[k])
        print(f"| {k} | {methods[k][1]} | {med * 1e3:.3f} | {med / base:.2f} |")


def _ood(args: argparse.Namespace) -> None:
    from bayesify.data import load_fashion_mnist, load_mnist

    train = load_fashion_mnist("train", limit=args.ood_train)
    test = load_fashion_mnist("test", limit=args.ood_rows)
    ood = load_mnist("test", limit=args.ood_rows)
    fit = {"epochs": args.ood_epochs, "batch_size": 64, "lr": 1e-3, "progress": False}
    print("\n| method | test error | AUROC entropy | AUROC MI | train s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, cls in (("plain", bayesify.Deterministic), ("vbll", bayesify.VBLL)):
        torch.manual_seed(0)
        m = cls(lenet(norm="batch"), task="classification")
        t0 = time.perf_counter()
        m.fit((train.x, train.y), **fit)
        elapsed = time.perf_counter() - t0
        t = 1 if name == "plain" else args.samples
        p_in = m.predict(test.x, samples=t, seed=0)
        p_out = m.predict(ood.x, samples=t, seed=0)
        err = (p_in.mean.argmax(-1) != test.y).float().mean().item()
        a_ent = auroc(p_in.entropy, p_out.entropy).item()
        mi = "—"
        if name != "plain":
            mi = f"{auroc(p_in.mutual_information, p_out.mutual_information).item():.3f}"
        print(f"| {name} | {err:.3f} | {a_ent:.3f} | {mi} | {elapsed:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--ood-train", type=int, default=10_000)
    parser.add_argument("--ood-epochs", type=int, default=3)
    parser.add_argument("--ood-rows", type=int, default=2000)
    parser.add_argument("--skip-ood", action="store_true")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    _cost(args)
    if not args.skip_ood:
        _ood(args)


if __name__ == "__main__":
    main()
