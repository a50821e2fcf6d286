"""One-pass prediction cost as a ratio to the plain floor, for two source trees side by side.

The floor is a plain pass of the same network without Bayesian layers over the same T·N rows
(the same row chunks as the one pass, the same ``Predictive`` built from its logits). Each tree
runs in worker processes of its own (``PYTHONPATH`` set to it); in every worker the floor and the
one pass run interleaved, so the ratios are paired, and the workers of the two trees alternate
round by round, so machine noise hits both alike.

    git archive main src | tar -x -C /tmp/old   # the code before
    python benchmarks/bbb_floor.py /tmp/old/src src --methods bbb --cells 1x32,1x100,64x32,64x100
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys


def worker(method: str, model: str, cells: list[tuple[int, int]], repeats: int) -> None:
    """Time floor and one pass for each (N, T) cell in the tree on ``sys.path``; print JSON."""
    import time

    import torch

    from bayesify.bench.speed.cases import build_case, build_net, random_data
    from bayesify.nn.folding import chunk_plan, repeat_samples, resolve_max_rows
    from bayesify.seeding import seeded

    case = build_case(method, model)
    m = case.method
    with seeded(0):
        plain = build_net(model, method).eval()
    out = {}
    for n, t in cells:
        x, _ = random_data(model, n, seed=2)
        ranges, per_chunk = chunk_plan(t, n, resolve_max_rows("auto", x, m.net))

        def floor(_r: int, x: torch.Tensor = x, t: int = t, ranges=ranges, per_chunk=per_chunk):
            with torch.no_grad():
                parts = [
                    plain(repeat_samples(c, b - a)).view(b - a, len(c), -1)
                    for a, b in ranges
                    for c in x.split(per_chunk)
                ]
                k = len(x.split(per_chunk))
                rows = [torch.cat(parts[i * k : (i + 1) * k], 1) for i in range(len(ranges))]
                return m.to_predictive(torch.cat(rows, 0))

        def one(r: int, x: torch.Tensor = x, t: int = t):
            return m.predict(x, t, seed=r)

        fns = {"floor": floor, "one-pass": one}
        for f in fns.values():
            f(0)
        times: dict[str, list[float]] = {k: [] for k in fns}
        for r in range(repeats):
            for k in list(fns)[r % 2 :] + list(fns)[: r % 2]:
                t0 = time.perf_counter()
                fns[k](r)
                times[k].append(time.perf_counter() - t0)
        out[f"{n}x{t}"] = times
    print(json.dumps(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--methods", default="bbb", help="registry names, comma-separated")
    p.add_argument("--model", default="lenet")
    p.add_argument("--cells", default="1x32,1x100,64x32,64x100", help="NxT, comma-separated")
    p.add_argument("--rounds", type=int, default=3, help="worker runs per tree, alternating")
    p.add_argument("--repeats", type=int, default=5, help="paired timings per worker run")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    cells = [tuple(int(v) for v in c.split("x")) for c in a.cells.split(",")]
    if a.worker:
        import torch

        torch.set_num_threads(a.threads)
        worker(a.worker[0], a.worker[1], cells, a.repeats)
        return
    trees = {"before": a.before, "after": a.after}
    for method in a.methods.split(","):
        ratios: dict[tuple[str, str], list[float]] = {}
        for r in range(a.rounds):
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for label in order:
                env = {**os.environ, "PYTHONPATH": os.path.abspath(trees[label]),
                       "OMP_NUM_THREADS": str(a.threads)}  # fmt: skip
                cmd = [sys.executable, __file__, a.before, a.after, "--cells", a.cells,
                       "--repeats", str(a.repeats), "--threads", str(a.threads),
                       "--worker", method, a.model]  # fmt: skip
                res = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True,
                                                text=True).stdout.splitlines()[-1])  # fmt: skip
                for cell, times in res.items():
                    pairs = zip(times["one-pass"], times["floor"], strict=True)
                    ratios.setdefault((label, cell), []).extend(o / f for o, f in pairs)
        print("| method | model | N | T | before: one-pass / floor | after: one-pass / floor |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        for c in a.cells.split(","):
            n, t = c.split("x")
            row = []
            for label in trees:
                q = statistics.quantiles(ratios[(label, c)], n=4, method="inclusive")
                row.append(f"{q[1]:.2f}× [{q[0]:.2f}, {q[2]:.2f}]")
            print(f"| {method} | {a.model} | {n} | {t} | {row[0]} | {row[1]} |")


if __name__ == "__main__":
    main()
