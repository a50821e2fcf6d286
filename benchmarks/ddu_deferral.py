"""Deferral by DDU's feature density against deferral by its softmax entropy (and by the
Mahalanobis score of the same features), on Fashion-MNIST with MNIST digits arriving among the
test rows: each policy is fitted for 90% coverage on in-distribution validation images, then
asked what it accepts of the test images and of the digits. Seeds: each seed draws its own
training subset, validation images and network initialisation.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/ddu_deferral.py --seeds 3

The policies are those ``bayesify calibrate`` fits and ``bayesify serve`` applies
(:class:`bayesify.posthoc.deferral.DeferralPolicy`, the feature scores handed in as
``row_scores`` from :func:`bayesify.ood_scores`).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import bayesify
from bayesify.bench.machine import machine_description
from bayesify.bench.summary import mean_se
from bayesify.data import load_fashion_mnist, load_mnist
from bayesify.models import lenet
from bayesify.posthoc.deferral import DeferralPolicy

SCORES = ("density", "entropy", "mahalanobis")


def _one_seed(args: argparse.Namespace, seed: int) -> dict[str, dict[str, float]]:
    """Per score: coverage of the test images, share of the digits accepted, error on the
    accepted test images, and the share of accepted rows that are digits in a stream of
    equal numbers of each."""
    train = load_fashion_mnist("train")
    perm = torch.randperm(len(train.y), generator=torch.Generator().manual_seed(seed))
    fit_rows, val_rows = (
        perm[: args.train_rows],
        perm[args.train_rows : args.train_rows + args.val_rows],
    )
    x, y = train.x[fit_rows], train.y[fit_rows]
    x_val, y_val = train.x[val_rows], train.y[val_rows]
    test = load_fashion_mnist("test").subset(args.test_rows, seed=seed)
    ood = load_mnist("test").subset(args.test_rows, seed=seed)
    torch.manual_seed(seed)
    ddu = bayesify.DDU(lenet(norm="batch"))
    ddu.fit((x, y), epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=seed,
            progress=False)  # fmt: skip
    bayesify.fit_mahalanobis(ddu, x, y)
    preds = {k: ddu.predict(v, samples=1, seed=0) for k, v in
             (("val", x_val), ("test", test.x), ("ood", ood.x))}  # fmt: skip
    rows = {"val": x_val, "test": test.x, "ood": ood.x}
    out: dict[str, dict[str, float]] = {}
    for score in SCORES:
        feature = {k: bayesify.ood_scores(ddu, v, [score], pred=preds[k])[score]
                   for k, v in rows.items()} if score != "entropy" else {}  # fmt: skip
        policy = DeferralPolicy.fit(preds["val"], y_val, score=score, target_coverage=0.9,
                                    row_scores=feature.get("val"))  # fmt: skip
        defer_test, _ = policy.decide(preds["test"], feature.get("test"))
        defer_ood, _ = policy.decide(preds["ood"], feature.get("ood"))
        kept = ~defer_test
        wrong = preds["test"].predicted_class != test.y
        accepted_ood = float((~defer_ood).sum())
        out[score] = {
            "coverage": float(kept.double().mean()),
            "digits accepted": float((~defer_ood).double().mean()),
            "error accepted": float(wrong[kept].double().mean()),
            "error all": float(wrong.double().mean()),
            "digits among accepted": accepted_ood / (accepted_ood + float(kept.sum())),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--train-rows", type=int, default=4000)
    parser.add_argument("--val-rows", type=int, default=1000)
    parser.add_argument("--test-rows", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    print(machine_description())
    t0 = time.time()
    runs = [_one_seed(args, seed) for seed in range(args.seeds)]
    print(f"\n{args.seeds} seed(s), {time.time() - t0:.0f} s wall\n")
    columns = list(runs[0]["density"])
    print("| deferral score | " + " | ".join(columns) + " |")
    print("| --- |" + " ---: |" * len(columns))
    for score in SCORES:
        cells = []
        for c in columns:
            m, se = mean_se([r[score][c] for r in runs])
            cells.append(f"{m:.3f} ± {se:.3f}")
        print(f"| {score} | " + " | ".join(cells) + " |")
    print("\nper seed (digits accepted):")
    for score in SCORES:
        vals = [f"{r[score]['digits accepted']:.3f}" for r in runs]
        print(
            f"  {score}: {', '.join(vals)} (median {statistics.median(float(v) for v in vals):.3f})"
        )


if __name__ == "__main__":
    main()
