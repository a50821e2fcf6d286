"""What keeping each sample's largest logit costs ``Predictive.from_logits``: median wall time
with ``keep_logits=True`` (the default) against ``keep_logits=False``, interleaved, per shape
``[T, N, C]``, and the time of a whole one-row ``method.predict`` of a small MLP beside it;
and the bytes kept against the samples' bytes.

    python benchmarks/ood_logits.py --repeats 15
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

import bayesify
from bayesify.predictive import Predictive

SHAPES = ((1, 1, 10), (100, 1, 10), (50, 1000, 10), (50, 2000, 100))


def median_pair(
    a: Callable[[], object], b: Callable[[], object], repeats: int
) -> tuple[float, float]:
    """Median seconds per call of ``a`` and ``b``, timed alternately (each round several calls)."""
    calls = 1
    while True:  # enough calls per round for about 20 ms
        t0 = time.perf_counter()
        for _ in range(calls):
            a()
        if time.perf_counter() - t0 > 0.02:
            break
        calls *= 2
    ta, tb = [], []
    for _ in range(repeats):
        for f, out in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            out.append((time.perf_counter() - t0) / calls)
    return statistics.median(ta), statistics.median(tb)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()
    torch.set_num_threads(1)
    print("| case | without (µs) | with (µs) | ratio | kept bytes / samples' bytes |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for shape in SHAPES:
        logits = torch.randn(*shape)
        off, on = median_pair(lambda t=logits: Predictive.from_logits(t, keep_logits=False),
                              lambda t=logits: Predictive.from_logits(t), args.repeats)  # fmt: skip
        pred = Predictive.from_logits(logits)
        share = pred.max_logits.nbytes / pred.samples.nbytes
        print(f"| from_logits {list(shape)} | {off * 1e6:.1f} | {on * 1e6:.1f} "
              f"| {on / off:.3f} | {share:.3f} |")  # fmt: skip
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 10))
    method = bayesify.MCDropout(net, task="classification")
    x = torch.randn(1, 8)
    logits = method.sample(x, 100, seed=0)
    whole, _ = median_pair(lambda: method.predict(x, samples=100, seed=0), lambda: None, 5)
    off, on = median_pair(lambda: Predictive.from_logits(logits, keep_logits=False),
                          lambda: Predictive.from_logits(logits), args.repeats)  # fmt: skip
    print(f"| MCDropout.predict, 1 row, T = 100, C = 10: {whole * 1e6:.0f} µs a call, of which "
          f"from_logits | {off * 1e6:.1f} | {on * 1e6:.1f} | {on / off:.3f} | |")  # fmt: skip


if __name__ == "__main__":
    main()
