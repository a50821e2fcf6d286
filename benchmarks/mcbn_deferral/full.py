"""deferral.md, MCBN: T = bank size, so every call uses all bank rows.

python benchmarks/mcbn_deferral/full.py BUNDLE N"""

import sys
import time

import bayesify
from bayesify.app.calibration import Split, predictive
from bayesify.data import load_fashion_mnist
from bayesify.posthoc.deferral import DeferralPolicy

m = bayesify.load(sys.argv[1])
n, samples, t0 = int(sys.argv[2]), m.bank_size, time.time()
sub = load_fashion_mnist("train").subset(m.metadata["limit"], seed=m.metadata.get("seed", 0))
test = load_fashion_mnist("test")
val = Split(sub.x[:n], sub.y[:n])
pol = DeferralPolicy.fit(predictive(m, val, samples, 0), val.y, score="mi", target_coverage=0.9)
print("T", samples, "threshold", pol.threshold, pol.validation, flush=True)
for name, rows, seed in [("test 0-", slice(0, n), 1), ("test 5000-", slice(5000, 5000 + n), 6)]:
    s = Split(test.x[rows], test.y[rows])
    figures = pol.evaluate(predictive(m, s, samples, seed), s.y)
    print(name, f"(seed {seed})", figures, f"({time.time() - t0:.0f}s)", flush=True)
