"""Packed-Ensembles against the plain network, a 4-member deep ensemble and BatchEnsemble:
parameters and weight memory per member, prediction time, and Fashion-MNIST -> MNIST OOD,
measured side by side in one run.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/packed_ensemble.py

Every method wraps the same network and is trained by ``fit`` with the same options on the
first ``--train`` Fashion-MNIST training images (``--epochs`` epochs, Adam 1e-3, batch 128, seed
``--seed``); ``--model`` is ``mlp`` (784-200-200-10 with batch norm, flattened images) or
``lenet`` (with batch norm). Prediction time: the CPU time of this process (one thread) for
``method.predict(x, samples=4)`` (T = 1 for the plain network) on N test images, the methods'
calls in a rotating order after a warm-up round, medians (and the fastest call) over
``--repeats`` rounds; ``--epochs 0`` measures time only. OOD: AUROC of the predictive entropy
and of the mutual information, Fashion-MNIST test (in) against MNIST test (out), ``--ood``
images each.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
from torch import nn

import bayesify
from bayesify.bench.machine import machine_description
from bayesify.data.idx import load_fashion_mnist, load_mnist
from bayesify.metrics.ood import auroc
from bayesify.models import lenet, mlp
from bayesify.nn.packed import PackedLinear
from bayesify.seeding import seeded

M = 4


def network(model: str) -> nn.Module:
    if model == "lenet":
        return lenet(norm="batch")
    return nn.Sequential(nn.Flatten(), *mlp(784, 10, (200, 200), norm="batch"))


def build(model: str, seed: int) -> dict[str, bayesify.Method]:
    with seeded(seed):
        net = network(model)
    kw = {"task": "classification"}
    return {
        "deterministic": bayesify.Deterministic(net, **kw),
        "ensemble": bayesify.DeepEnsemble(net, members=M, init_seed=seed, **kw),
        "batch-ensemble": bayesify.BatchEnsemble(net, members=M, init_seed=seed, **kw),
        "packed-ensemble": bayesify.PackedEnsemble(net, members=M, init_seed=seed, **kw),
    }


def owned_per_member(method: bayesify.Method) -> float:
    """Parameters a member owns: all of its own network (ensemble), its fast weights and biases
    (BatchEnsemble: W is shared), its disjoint block of every layer (Packed-Ensembles)."""
    total = sum(p.numel() for p in method.net.parameters())
    if isinstance(method, bayesify.BatchEnsemble):
        return sum(t.numel() for la in method.layers for t in (la.r, la.s, la.bias)) / M
    return total / (1 if isinstance(method, bayesify.Deterministic) else M)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("mlp", "lenet"), default="mlp")
    parser.add_argument("--train", type=int, default=10000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n", default="64,1000")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--ood", type=int, default=2000)
    args = parser.parse_args()
    train = load_fashion_mnist("train", limit=args.train)
    test = load_fashion_mnist("test", limit=max(args.ood, 1000))
    ood = load_mnist("test", limit=args.ood)
    methods = build(args.model, args.seed)
    print(machine_description())
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}; model {args.model}, "
          f"{args.train} training images, {args.epochs} epochs, seed {args.seed}\n")  # fmt: skip
    rows = []
    for name, m in methods.items():
        if args.epochs == 0:  # timing only: the cost of a pass does not depend on the weights
            continue
        t0 = time.perf_counter()
        m.fit((train.x, train.y), epochs=args.epochs, batch_size=128, lr=1e-3, seed=args.seed,
              progress=False)  # fmt: skip
        fit_s = time.perf_counter() - t0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p_in = m.predict(test.x[: args.ood], samples=M)
            p_out = m.predict(ood.x, samples=M)
        acc = (p_in.mean.argmax(-1) == test.y[: args.ood]).double().mean().item()
        ent = auroc(p_in.entropy, p_out.entropy).item()
        mi = auroc(p_in.mutual_information, p_out.mutual_information).item()
        params = sum(p.numel() for p in m.net.parameters())
        own = owned_per_member(m)
        rows.append(f"| {name} | {params} | {own:.0f} | {own * 4 / 1024:.1f} | {acc:.3f} | "
                    f"{ent:.3f} | {mi:.3f} | {fit_s:.0f} s |")  # fmt: skip
    if rows:
        print("| method | parameters | owned per member | KiB per member (float32) | accuracy | "
              "AUROC entropy | AUROC MI | fit |")  # fmt: skip
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        print("\n".join(rows))
    names = list(methods)
    print("\nCPU ms per call, median (fastest), then per 1,000 rows (median)\n")
    print("| N | " + " | ".join(f"{k}" for k in names) + " | packed / ensemble |")
    print("| ---: |" + " ---: |" * (len(names) + 1))
    for n in (int(v) for v in args.n.split(",")):
        x = test.x[:n]
        times: dict[str, list[float]] = {k: [] for k in names}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for r in range(args.repeats + 1):
                for k in names[r % len(names) :] + names[: r % len(names)]:
                    t0 = time.process_time()  # this process's CPU time: robust to a loaded machine
                    methods[k].predict(x, samples=1 if k == "deterministic" else M)
                    if r:  # round 0 warms up
                        times[k].append(time.process_time() - t0)
        med = {k: statistics.median(times[k]) * 1e3 for k in names}
        best = {k: min(times[k]) * 1e3 for k in names}
        ratio = med["packed-ensemble"] / med["ensemble"]
        ratio_best = best["packed-ensemble"] / best["ensemble"]
        cells = " | ".join(f"{med[k]:.2f} ({best[k]:.2f})" for k in names)
        print(f"| {n} | {cells} | {ratio:.2f} ({ratio_best:.2f}) |")
        per_k = " | ".join(f"{med[k] * 1000 / n:.1f} / 1k" for k in names)
        print(f"| {n} | {per_k} | |")
    packed = methods["packed-ensemble"]
    assert isinstance(packed, bayesify.PackedEnsemble)
    widths = [(k.in_features, k.out_features, getattr(k, "groups", 1)) for k in packed.net
              if isinstance(k, PackedLinear | nn.Linear)]  # fmt: skip
    print(f"\npacked network's linear layers (in, out, groups): {widths}")


if __name__ == "__main__":
    main()
