"""# MC batch norm: intervals on the diabetes data

A network with batch norm already holds randomness: the statistics of its training mini-batches.
`bayesify.MCBN` (Teye et al. 2018) samples them at prediction time. Here on scikit-learn's
diabetes data (442 patients, 10 features, disease progression after a year; bundled with
scikit-learn, nothing to download): test RMSE, log-likelihood, CRPS and how often the 90%
interval covers the truth, in the target's own units.
"""

import matplotlib.pyplot as plt
import torch
from sklearn.datasets import load_diabetes
from torch import nn

import bayesify

torch.manual_seed(0)
X, y = (torch.as_tensor(a, dtype=torch.float32) for a in load_diabetes(return_X_y=True))
order = torch.randperm(len(X), generator=torch.Generator().manual_seed(0))
train, val, test = order[:300], order[300:370], order[370:]
mu, sd = y[train].mean(), y[train].std()  # the network learns standardised targets
X = (X - X[train].mean(0)) / X[train].std(0)
z = (y - mu) / sd

net = nn.Sequential(nn.Linear(10, 50), nn.BatchNorm1d(50), nn.ReLU(), nn.Linear(50, 1))
mcbn = bayesify.MCBN(net).fit(
    (X[train], z[train]), val=(X[val], z[val]), epochs=60, batch_size=32, progress=False
)
pred = mcbn.predict(X[test], samples=100, seed=0).affine(mu, sd)  # back to the target's units

lower, upper = pred.interval(0.9)
covered = ((y[test] >= lower) & (y[test] <= upper)).float().mean()
rmse = (pred.mean - y[test]).pow(2).mean().sqrt()
print(f"test RMSE {rmse:.1f}, log-likelihood {pred.log_prob(y[test]).mean():.2f} per row, "
      f"CRPS {pred.crps(y[test]).mean():.1f}")  # fmt: skip
print(f"90% intervals cover {covered:.0%} of {len(test)} test patients, "
      f"mean width {(upper - lower).mean():.0f}")  # fmt: skip
print(f"epistemic share of the variance: "
      f"{(pred.epistemic_variance / pred.variance).mean():.1%}")  # fmt: skip

rank = pred.mean.argsort()
plt.figure(figsize=(7, 3.5))
plt.fill_between(range(len(test)), lower[rank], upper[rank], alpha=0.3, label="90% interval")
plt.plot(pred.mean[rank], label="predictive mean")
plt.plot(y[test][rank], ".", color="k", label="truth")
plt.xlabel("test patients, by predicted progression")
plt.ylabel("progression")
plt.legend()
plt.tight_layout()
plt.savefig("intervals.png", dpi=90)
