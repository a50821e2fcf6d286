"""SWAG's one-pass prediction cost on the LeNet as a ratio to the plain floor (one plain
forward over the same T·N rows), measured side by side in one run.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/swag_speed.py --repeats 3

Variants per cell (N, T): the plain LeNet over T·N rows (the floor), SWAG with batch norm
recomputed per sample (default, ``bn_rows=64``), SWAG with each member's SWA statistics
(``batch_norm="swa"``), MultiSWAG with 3 members (recompute). The variants of a cell run
interleaved in a rotating order (one warm-up round before the first cell); ratios are medians
of the per-repetition ratios. The moments come from a short SWAG run on random images (the cost of a
prediction does not depend on what the weights learned).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import bayesify
from bayesify.models import lenet


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", default="1,64")
    parser.add_argument("--t", default="32,100")
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(256, 1, 28, 28)
    y = torch.randint(0, 10, (256,))
    net = lenet().eval()
    common = {"task": "classification", "epochs": 3, "batch_size": 32, "collect_every": 1}
    variants = {
        "swag": bayesify.SWAG.from_pretrained(net, (x, y), **common),
        "swag swa-bn": bayesify.SWAG.from_pretrained(net, (x, y), batch_norm="swa", **common),
        "multiswag (3)": bayesify.MultiSWAG.from_pretrained(net, (x, y), **common),
    }
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    print("| N | T | floor ms | " + " | ".join(f"{k} ms (× floor)" for k in variants) + " |")
    print("| ---: | ---: | ---: |" + " ---: |" * len(variants))
    first = True
    for n in (int(v) for v in args.n.split(",")):
        for t in (int(v) for v in args.t.split(",")):
            rows = x[:n].repeat(t, 1, 1, 1)  # [T*N, ...]
            calls = {"floor": lambda rows=rows: net(rows)}
            for name, m in variants.items():
                calls[name] = lambda m=m, n=n, t=t: m.predict(x[:n], samples=t, seed=0)
            times: dict[str, list[float]] = {k: [] for k in calls}
            names = list(calls)
            warm = first
            first = False
            with torch.no_grad():
                for r in range(0 if warm else 1, args.repeats + 1):
                    for k in names[r % len(names) :] + names[: r % len(names)]:
                        t0 = time.perf_counter()
                        calls[k]()
                        if r:  # round 0 warms up
                            times[k].append(time.perf_counter() - t0)
            floor = statistics.median(times["floor"]) * 1e3
            cells = []
            for k in variants:
                pairs = zip(times[k], times["floor"], strict=True)
                ratio = statistics.median(a / b for a, b in pairs)
                cells.append(f"{statistics.median(times[k]) * 1e3:.0f} ({ratio:.1f}×)")
            print(f"| {n} | {t} | {floor:.1f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
