"""deferral.md, MCBN: MI, error and the plain network's error and entropy per row group, one seed.

python benchmarks/mcbn_deferral/measure.py BUNDLE N T"""

import sys

import numpy as np
import torch
from rows import unseen_training_rows

import bayesify
from bayesify.data import load_fashion_mnist

m = bayesify.load(sys.argv[1])
n, samples = int(sys.argv[2]), int(sys.argv[3])
full, test = load_fashion_mnist("train"), load_fashion_mnist("test")
sub = full.subset(m.metadata["limit"], seed=m.metadata.get("seed", 0))
n_val = len(sub.x) // 10
rng, unseen = np.random.default_rng(123), unseen_training_rows(m.metadata)
rng.choice(unseen, n, False)  # the page's figures used this generator's second draw
u = torch.from_numpy(rng.choice(unseen, n, False))
groups = {
    "validation": (sub.x[:n_val][:n], sub.y[:n_val][:n]),
    "training rows (bank)": (sub.x[n_val:][:n], sub.y[n_val:][:n]),
    "unseen training-file": (full.x[u], full.y[u]),
    "test 0-": (test.x[:n], test.y[:n]),
    "test 5000-": (test.x[5000 : 5000 + n], test.y[5000 : 5000 + n]),
}
mis = {}
for name, (x, y) in groups.items():
    pred = m.to_predictive(m.sample(x, samples, seed=5))
    mis[name] = pred.mutual_information.numpy()
    err = float((pred.mean.argmax(-1) != y).float().mean())
    with torch.no_grad():
        m.net.eval()
        p = m.net(x).softmax(-1)  # running statistics: the plain network
    ent = float(-(p * p.clamp_min(1e-12).log()).sum(-1).mean())
    plain = float((p.argmax(-1) != y).float().mean())
    print(f"{name}: MI {mis[name].mean():.4f} err {err:.3f} | plain err {plain:.3f} ent {ent:.4f}")
thr = np.quantile(mis["validation"], 0.9)
for name, mi in mis.items():
    print(f"{name}: coverage at the validation q90 ({thr:.4f}) {(mi <= thr).mean():.3f}")
