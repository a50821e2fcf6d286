"""DDU against the plain network and a 4-member deep ensemble on Fashion-MNIST (MNIST as the
out-of-distribution set): test error, OOD AUROC by each method's scores, and the cost of a
prediction per 1,000 rows, measured side by side in one run.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/ddu.py --train-rows 10000 --epochs 3

All three are LeNets with batch norm (``bayesify.models.lenet``), trained by ``fit`` with the
same options from the same seed on the same random subset of the training images (DDU's with
its hidden layers spectrally bounded, c = 3, and its feature density fitted after training).
Prediction: T = 1 for the deterministic network and DDU (their samples are all equal), T = 4
for the ensemble (each member once); DDU's epistemic score, ``density_score``, is timed apart.
Calls alternate in a rotating order after a warm-up round; times are medians.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import bayesify
from bayesify.bench.machine import machine_description
from bayesify.data import load_fashion_mnist, load_mnist
from bayesify.metrics import auroc, error_rate, nll
from bayesify.models import lenet


def _fit(name: str, args: argparse.Namespace, x: torch.Tensor, y: torch.Tensor) -> Any:
    torch.manual_seed(args.seed)
    net = lenet(norm="batch")
    cls = {"task": "classification"}
    method = {
        "deterministic": lambda: bayesify.Deterministic(net, **cls),
        "ddu": lambda: bayesify.DDU(net),
        "ensemble": lambda: bayesify.DeepEnsemble(net, members=4, **cls),
    }[name]()
    t0 = time.perf_counter()
    method.fit((x, y), epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
               seed=args.seed, progress=False)  # fmt: skip
    return method, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-rows", type=int, default=10000)
    parser.add_argument("--test-rows", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    print(machine_description())
    train = load_fashion_mnist("train")
    perm = torch.randperm(len(train.y), generator=torch.Generator().manual_seed(args.seed))
    x, y = train.x[perm[: args.train_rows]], train.y[perm[: args.train_rows]]
    test = load_fashion_mnist("test").subset(args.test_rows, seed=args.seed)
    ood = load_mnist("test").subset(args.test_rows, seed=args.seed)
    samples = {"deterministic": 1, "ddu": 1, "ensemble": 4}
    methods = {}
    print("\n| method | training s | test error | test NLL | OOD score | AUROC (MNIST) |")
    print("| --- | ---: | ---: | ---: | --- | ---: |")
    for name in samples:
        method, seconds = _fit(name, args, x, y)
        methods[name] = method
        p_in = method.predict(test.x, samples=samples[name], seed=0)
        p_out = method.predict(ood.x, samples=samples[name], seed=1)
        scores: dict[str, tuple[torch.Tensor, torch.Tensor]] = {
            "entropy": (p_in.entropy, p_out.entropy)
        }
        if name == "ensemble":
            scores["mutual information"] = (p_in.mutual_information, p_out.mutual_information)
        if name == "ddu":  # low density = out of distribution
            scores["-log density"] = (-method.density_score(test.x), -method.density_score(ood.x))
        err, loss = float(error_rate(p_in.mean, test.y)), float(nll(p_in.mean, test.y))
        for i, (score, (s_in, s_out)) in enumerate(scores.items()):
            head = f"{name} | {seconds:.0f} | {err:.4f} | {loss:.4f}" if i == 0 else "| | |"
            print(f"| {head} | {score} | {float(auroc(s_in, s_out)):.4f} |")
    calls: dict[str, Callable[[torch.Tensor], Any]] = {
        name: functools.partial(methods[name].predict, samples=t, seed=0)
        for name, t in samples.items()
    }
    calls["ddu density_score"] = methods["ddu"].density_score
    rows = test.x[:1000]
    times: dict[str, list[float]] = {k: [] for k in calls}
    names = list(calls)
    with torch.no_grad():
        for r in range(args.repeats + 1):
            for k in names[r % len(names) :] + names[: r % len(names)]:
                t0 = time.perf_counter()
                calls[k](rows)
                if r:  # round 0 warms up
                    times[k].append(time.perf_counter() - t0)
    base = statistics.median(times["deterministic"])
    print("\n| call (1,000 rows) | T | median ms | ratio to deterministic |")
    print("| --- | ---: | ---: | ---: |")
    for k in names:
        med = statistics.median(times[k])
        t = samples.get(k, "–")
        print(f"| {k} | {t} | {med * 1e3:.1f} | {med / base:.2f} |")


if __name__ == "__main__":
    main()
