"""Peak RSS of one prediction call, in a fresh process (benchmarks/memory.md).

    python benchmarks/memory_probe.py huge           # predict(x[:1], samples=10**9)
    python benchmarks/memory_probe.py long N T       # N rows, T samples, MLP 8-256-256-1
    python benchmarks/memory_probe.py wide N T       # N rows, T samples, MLP 8-30000-1

MC dropout (p = 0.1) on bayesify's MLP; prints the peak RSS before and after the call
(``getrusage(RUSAGE_SELF).ru_maxrss``), the error if the call was refused, and the CPU seconds.
"""

from __future__ import annotations

import resource
import sys
import time

import torch

import bayesify
from bayesify.models import mlp


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    case = sys.argv[1]
    torch.manual_seed(0)
    hidden = (30000,) if case == "wide" else (256, 256)
    method = bayesify.MCDropout(mlp(8, 1, hidden=hidden, dropout=0.1))
    method.noise_variance = 0.1
    method.predict(torch.randn(4, 8), samples=4)  # lazy imports and first allocations
    n, t = (1, 10**9) if case == "huge" else (int(sys.argv[2]), int(sys.argv[3]))
    before, start = peak_mb(), time.process_time()
    try:
        method.predict(torch.randn(n, 8), samples=t)
        outcome = "finished"
    except Exception as e:  # noqa: BLE001 - the probe reports whatever happened
        outcome = f"{type(e).__name__}: {e}"
    print(f"{case} N={n} T={t}: peak RSS {before:.0f} MB before, {peak_mb():.0f} MB after; "
          f"{time.process_time() - start:.1f} s CPU; {outcome}")  # fmt: skip


if __name__ == "__main__":
    main()
