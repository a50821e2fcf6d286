"""# Conformal intervals: coverage you can count on

A method's own intervals are only as good as its uncertainty. Split-conformal calibration on
held-out rows (`bayesify.calibrate_conformal`) rescales them so that, for rows exchangeable with
the calibration rows, a new target is covered with probability at least the level. Here MC
dropout on scikit-learn's bundled diabetes data: the coverage of its own and of the conformal
intervals on test rows, level by level.
"""

import matplotlib.pyplot as plt
import torch
from sklearn.datasets import load_diabetes
from torch import nn

import bayesify

torch.manual_seed(0)
X, y = (torch.as_tensor(a, dtype=torch.float32) for a in load_diabetes(return_X_y=True))
order = torch.randperm(len(X), generator=torch.Generator().manual_seed(1))
train, val, cal, test = order[:200], order[200:260], order[260:350], order[350:]
X = (X - X[train].mean(0)) / X[train].std(0)
y = (y - y[train].mean()) / y[train].std()

net = nn.Sequential(nn.Linear(10, 50), nn.ReLU(), nn.Dropout(0.1), nn.Linear(50, 1))
dropout = bayesify.MCDropout(net).fit(
    (X[train], y[train]), val=(X[val], y[val]), epochs=60, progress=False
)
conformal = bayesify.calibrate_conformal(dropout, (X[cal], y[cal]), samples=50)

pred = dropout.predict(X[test], samples=50, seed=0)
levels = [0.5, 0.6, 0.7, 0.8, 0.9, 0.95]
own, calibrated = [], []
for level in levels:
    for intervals, out in (
        (pred.interval(level), own),
        (conformal.interval(pred, level), calibrated),
    ):
        lo, hi = intervals
        out.append(float(((y[test] >= lo) & (y[test] <= hi)).float().mean()))
print(f"coverage on {len(test)} test rows (calibrated on {len(cal)} others)")
print("level   MC dropout   conformal")
for level, a, b in zip(levels, own, calibrated, strict=True):
    print(f"{level:5.2f}   {a:10.1%}   {b:9.1%}")

plt.figure(figsize=(4.5, 4))
plt.plot(levels, levels, "k:", label="the level")
plt.plot(levels, own, "o-", label="MC dropout's own")
plt.plot(levels, calibrated, "s-", label="conformal")
plt.xlabel("level")
plt.ylabel("test coverage")
plt.legend()
plt.tight_layout()
plt.savefig("coverage.png", dpi=90)
