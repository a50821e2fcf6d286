"""Median latency of single-image predicts (T = 32 fixed; adaptive 8-32, tol 0.03) of a teacher
bundle and its distilled student, interleaved in one process on one thread.

    python benchmarks/distill_latency.py TEACHER STUDENT
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

import bayesify
from bayesify.data import load_fashion_mnist


def main(teacher: str, student: str) -> None:
    torch.set_num_threads(1)
    models = {"teacher": bayesify.load(teacher), "student": bayesify.load(student)}
    x = load_fashion_mnist("test").x[:200]
    times = {(k, m): [] for k in models for m in ("fixed", "adaptive")}
    for i in range(200):
        for k, m in models.items():
            t = time.perf_counter()
            m.predict(x[i : i + 1], 32, seed=i)
            times[k, "fixed"].append(time.perf_counter() - t)
            t = time.perf_counter()
            m.predict(x[i : i + 1], "adaptive", tol=0.03, start=8, max_samples=32, seed=i)
            times[k, "adaptive"].append(time.perf_counter() - t)
    for key, v in times.items():
        v = sorted(v)
        p90 = 1000 * v[int(0.9 * len(v))]
        print(key, f"median {1000 * statistics.median(v):.2f} ms, p90 {p90:.2f} ms")
    for k, m in models.items():
        t = time.perf_counter()
        for _ in range(5):
            m.predict(x, 32, seed=0)
        print(k, f"200 images T=32: {1000 * (time.perf_counter() - t) / 5:.1f} ms")


if __name__ == "__main__":
    main(*sys.argv[1:3])
