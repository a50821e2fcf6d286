"""# SWAG: a posterior from where SGD keeps going

`bayesify.SWAG.from_pretrained` (Maddox et al. 2019) runs a few more epochs of SGD from weights
you trained, at a high constant learning rate, and keeps the mean and the low-rank plus diagonal
covariance of where the weights go. The collecting rate is the setting that matters: too low and
the weights hardly move, so the Gaussian collapses onto the trained network (bayesify then warns
that the weights' share of the spread is negligible). On scikit-learn's bundled diabetes data,
the plain network beside SWAG at two collecting rates: error, log-likelihood and the weights'
(epistemic) share of the predictive variance.
"""

import warnings

import matplotlib.pyplot as plt
import torch
from sklearn.datasets import load_diabetes
from torch import nn

import bayesify

torch.manual_seed(0)
X, y = (torch.as_tensor(a, dtype=torch.float32) for a in load_diabetes(return_X_y=True))
order = torch.randperm(len(X), generator=torch.Generator().manual_seed(0))
train, val, test = order[:300], order[300:370], order[370:]
X = (X - X[train].mean(0)) / X[train].std(0)
y = (y - y[train].mean()) / y[train].std()

net = nn.Sequential(nn.Linear(10, 50), nn.ReLU(), nn.Linear(50, 50), nn.ReLU(), nn.Linear(50, 1))
plain = bayesify.Deterministic(net).fit(
    (X[train], y[train]), val=(X[val], y[val]), epochs=60, weight_decay=1e-3, progress=False
)
trained = plain.net  # a network trained outside SWAG

methods = {"plain network": plain}
for rate in (0.001, 0.1):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        swag = bayesify.SWAG.from_pretrained(
            trained, (X[train], y[train]), val=(X[val], y[val]), swag_epochs=20, swag_lr=rate
        )
        swag.predict(X[val], samples=30, seed=0)
    for w in caught[:1]:
        print(f"swag_lr={rate}: {type(w.message).__name__}: {str(w.message)[:110]}...")
    methods[f"SWAG, swag_lr={rate}"] = swag

warnings.simplefilter("ignore", bayesify.NegligibleSpreadWarning)  # said once above
print("test rows:", len(test), "(standardised units)")
shares = {}
for name, method in methods.items():
    pred = method.predict(X[test], samples=50, seed=0)
    rmse = (pred.mean - y[test]).pow(2).mean().sqrt()
    shares[name] = (pred.epistemic_variance / pred.variance).mean().item()
    print(f"{name:20s} RMSE {rmse:.3f}  log-likelihood {pred.log_prob(y[test]).mean():+.3f}  "
          f"epistemic share {shares[name]:.1%}")  # fmt: skip

plt.figure(figsize=(6, 2.8))
plt.barh(list(shares), [100 * s for s in shares.values()])
plt.xlabel("epistemic share of the predictive variance (%)")
plt.tight_layout()
plt.savefig("epistemic_share.png", dpi=90)
