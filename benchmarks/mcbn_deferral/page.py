"""deferral.md, MCBN: a one-draw policy (T = 32) fitted on validation, held-out figures.

python benchmarks/mcbn_deferral/page.py BUNDLE N (a copy: calibrate stores the policy in it)."""

import sys
import time

import numpy as np
import torch
from rows import unseen_training_rows

import bayesify
from bayesify.app.calibration import Split, calibrate_bundle, predictive
from bayesify.data import load_fashion_mnist

bundle, n = sys.argv[1], int(sys.argv[2])
t0 = time.time()
m = bayesify.load(bundle)
res = calibrate_bundle(m, score="mi", coverage=0.9, samples=32, test_limit=n, decision=None)
pol = res.policy
print("threshold", pol.threshold, "validation", pol.validation, flush=True)
print(f"test 0-{n - 1} (seed 1)", res.test, f"({time.time() - t0:.0f}s)", flush=True)
full, test = load_fashion_mnist("train"), load_fashion_mnist("test")
u = torch.from_numpy(np.random.default_rng(5).choice(unseen_training_rows(m.metadata), n, False))
b = slice(5000, 5000 + n)
for name, split, seed in [
    ("unseen training-file rows", Split(full.x[u], full.y[u]), 5),
    (f"test 5000-{5000 + n - 1}", Split(test.x[b], test.y[b]), 6),
]:
    figures = pol.evaluate(predictive(m, split, 32, seed), split.y)
    print(name, f"(seed {seed})", figures, f"({time.time() - t0:.0f}s)", flush=True)
