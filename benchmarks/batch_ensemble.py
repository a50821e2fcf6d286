"""BatchEnsemble against DeepEnsemble at the same member count: parameters, bundle bytes and
the cost of one prediction (all members, T = M), measured side by side in one run.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/batch_ensemble.py BUNDLE_BE BUNDLE_DE

The bundles are those ``bayesify train`` wrote (benchmarks/batch_ensemble.md has the commands).
Inputs are the normalised test rows of UCI yacht, split 0 (teye), repeated to N rows; the two
methods' calls alternate in a rotating order after a warm-up round; times are medians.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

import bayesify
from bayesify.methods.core.spread import epistemic_share


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bundles", nargs=2, type=Path)
    parser.add_argument("--n", default="64,1000")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    from bayesify.data.uci import load_uci

    split = load_uci("yacht", 0, protocol="teye")
    methods = {p.name: bayesify.load(p) for p in args.bundles}
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(
        "| method | parameters | added per member | weights file bytes | epistemic share (test) |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, m in methods.items():
        params = sum(p.numel() for p in m.net.parameters())
        own = params  # a deep ensemble's members own all their parameters
        if isinstance(m, bayesify.BatchEnsemble):  # only r, s and the bias are a member's
            own = sum(t.numel() for layer in m.layers for t in (layer.r, layer.s, layer.bias))
        size = (args.bundles[list(methods).index(name)] / "weights.safetensors").stat().st_size
        pred = m.to_predictive(m.sample(split.x_test, 4, seed=0))
        share = epistemic_share(pred)
        print(f"| {name} | {params} | {own / 4:.0f} | {size} | {share:.3f} |")
    print()
    print("| N | " + " | ".join(f"{k} ms" for k in methods) + " | ratio |")
    print("| ---: |" + " ---: |" * (len(methods) + 1))
    for n in (int(v) for v in args.n.split(",")):
        x = split.x_test.repeat(n // len(split.x_test) + 1, 1)[:n]
        times: dict[str, list[float]] = {k: [] for k in methods}
        names = list(methods)
        with torch.no_grad():
            for r in range(args.repeats + 1):
                for k in names[r % 2 :] + names[: r % 2]:
                    t0 = time.perf_counter()
                    methods[k].sample(x, 4, seed=0)
                    if r:  # round 0 warms up
                        times[k].append(time.perf_counter() - t0)
        med = [statistics.median(times[k]) * 1e3 for k in names]
        print(f"| {n} | " + " | ".join(f"{v:.3f}" for v in med) + f" | {med[0] / med[1]:.2f} |")


if __name__ == "__main__":
    main()
