"""Test-time augmentation's prediction cost as a ratio to the plain floor (benchmarks/speed.md).

    python benchmarks/tta_speed.py [--repeats 5] [--threads 1]

The floor is the same LeNet (batch norm, dropout 0.1, eval mode) alone over the ``T·N``
repeated rows, in the chunks ``predict`` uses (``max_rows="auto"``), the rows materialised
before the timing (a stride-0 view of one image stays in cache: about 20% cheaper at N = 1):
what any one-pass method must at least spend when nothing is shared between its T samples. The
variants, each a complete ``predict`` (a ``Predictive``) on random weights and inputs: TTA over
the plain network (flip,shift:2; noise:0.05), MC dropout alone (its convolutions run once, on N
rows, before the dropout), and MC dropout + TTA (flip,shift:2). All run interleaved in one
process (``time_interleaved``: rotating order, one warm-up round); ratios are medians of the
per-round ratios with their quartiles.
"""

from __future__ import annotations

import argparse
import statistics

import torch

import bayesify
from bayesify.bench.machine import machine_description
from bayesify.bench.speed.cases import time_interleaved
from bayesify.models import lenet
from bayesify.nn import chunk_plan, repeat_samples, resolve_max_rows

VARIANTS = {
    "tta flip,shift:2": {"transforms": "flip,shift:2"},
    "tta noise:0.05": {"transforms": "noise:0.05"},
    "mc-dropout": None,
    "mc-dropout + tta flip,shift:2": {"transforms": "flip,shift:2", "method": "mc-dropout"},
}


def _methods(net: torch.nn.Module) -> dict[str, bayesify.Method]:
    out: dict[str, bayesify.Method] = {}
    for name, kw in VARIANTS.items():
        if kw is None:
            out[name] = bayesify.MCDropout(net, task="classification")
            continue
        kw = dict(kw)
        if kw.pop("method", None):
            kw["method"] = bayesify.MCDropout
        out[name] = bayesify.TTA(net, task="classification", **kw)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n", default="1,64")
    ap.add_argument("--t", default="32,100")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net = lenet(norm="batch", dropout=0.1).eval()
    methods = _methods(net)
    print(machine_description())
    print()
    print("| N | T | floor ms | " + " | ".join(f"{k} / floor" for k in VARIANTS) + " |")
    print("| ---: | ---: | ---: | " + " | ".join("---:" for _ in VARIANTS) + " |")
    for n in (int(v) for v in args.n.split(",")):
        x = torch.randn(n, 1, 28, 28)
        for t in (int(v) for v in args.t.split(",")):
            rows = resolve_max_rows("auto", x, net)
            _, per_chunk = chunk_plan(t, n, rows)  # the data rows of each forward of predict
            chunks = [repeat_samples(c, t).contiguous() for c in x.split(per_chunk)]

            def floor(_r: int, chunks: list[torch.Tensor] = chunks) -> None:
                with torch.no_grad():
                    for c in chunks:
                        net(c)

            fns = {"floor": floor}
            for name, m in methods.items():
                fns[name] = lambda r, m=m, t=t, x=x: m.predict(x, samples=t, seed=r)
            times = time_interleaved(fns, args.repeats, 1, torch.device("cpu"))
            base = times["floor"]
            cells = []
            for name in VARIANTS:
                ratios = [a / b for a, b in zip(times[name], base, strict=True)]
                q = statistics.quantiles(ratios, n=4, method="inclusive")
                cells.append(f"{q[1]:.2f}× [{q[0]:.2f}, {q[2]:.2f}]")
            floor_ms = 1000 * statistics.median(base)
            print(f"| {n} | {t} | {floor_ms:.1f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
