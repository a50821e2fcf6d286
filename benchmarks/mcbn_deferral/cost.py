"""deferral.md, MCBN: one predict call with bank rows drawn per data row against one draw per
call, on the same fitted MCBN, the two modes alternated in one process (median of the calls).

python benchmarks/mcbn_deferral/cost.py"""

import dataclasses
import statistics
import time

import torch

import bayesify
from bayesify.models import lenet, mlp

torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)


def bench(name, net, x, y, task, n, samples, reps):
    m = bayesify.MCBN(net, task=task, bank_size=256)
    m.fit((x, y), epochs=1, batch_size=32, progress=False)
    q, times = x[:n], {}
    for mode in ("call", "row", "call", "row"):
        m.config = dataclasses.replace(m.config, bank_draw=mode)
        m.predict(q, samples=samples, seed=0)  # warm
        for r in range(reps):
            t0 = time.perf_counter()
            m.predict(q, samples=samples, seed=r)
            times.setdefault(mode, []).append(time.perf_counter() - t0)
    c, r = statistics.median(times["call"]), statistics.median(times["row"])
    print(f"{name}: N={n} T={samples}: call {c * 1e3:.1f} ms, row {r * 1e3:.1f} ms, "
          f"row/call {r / c:.2f} ({2 * reps} calls each)", flush=True)  # fmt: skip


x = torch.randn(8192, 8, generator=g)
y = x[:, 0] + 0.1 * torch.randn(8192, generator=g)
bench("MLP 8-50-50-1 (BatchNorm1d)", mlp(8, hidden=(50, 50)), x, y, "regression", 1000, 50, 10)
bench("MLP 8-50-50-1 (BatchNorm1d)", mlp(8, hidden=(50, 50)), x, y, "regression", 100, 32, 20)
xi = torch.randn(2048, 1, 28, 28, generator=g)
yi = torch.randint(0, 10, (2048,), generator=g)
bench("LeNet (BatchNorm2d)", lenet(norm="batch"), xi, yi, "classification", 500, 32, 4)
