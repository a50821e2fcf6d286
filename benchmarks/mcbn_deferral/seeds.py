"""deferral.md, MCBN: the same validation and test rows in one call per seed (T = 32).

python benchmarks/mcbn_deferral/seeds.py BUNDLE N SEEDS"""

import sys

import numpy as np
import torch

import bayesify
from bayesify.data import load_fashion_mnist

m = bayesify.load(sys.argv[1])
n, seeds = int(sys.argv[2]), int(sys.argv[3])
sub = load_fashion_mnist("train").subset(m.metadata["limit"], seed=m.metadata.get("seed", 0))
x = torch.cat([sub.x[:n], load_fashion_mnist("test").x[:n]])  # validation rows, then test rows
thr0 = None
for seed in range(seeds):
    mi = m.to_predictive(m.sample(x, 32, seed=seed)).mutual_information.numpy()
    v, t = mi[:n], mi[n:]
    thr = np.quantile(v, 0.9)
    thr0 = thr if thr0 is None else thr0
    print(
        f"seed {seed}: mean MI val {v.mean():.4f} test {t.mean():.4f} | val q90 {thr:.4f} | "
        f"test coverage at own q90 {(t <= thr).mean():.3f} | at seed 0's q90: "
        f"val {(v <= thr0).mean():.3f} test {(t <= thr0).mean():.3f}",
        flush=True,
    )
