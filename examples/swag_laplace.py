"""# SWAG and Laplace: a posterior around weights you already trained

Both start from a trained network and put a Gaussian around its weights. SWAG (Maddox et al.
2019) runs a few more epochs of SGD from your weights and keeps the moments of where they go;
Laplace (MacKay 1992, Daxberger et al. 2021) reads the curvature of the loss at your weights,
here over the last layer. On scikit-learn's bundled diabetes data, the two beside the plain
network (with the same fitted noise variance): error, log-likelihood and the weights' share of
the spread.
"""

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
trained = plain.net  # a network trained outside SWAG and Laplace

swag = bayesify.SWAG.from_pretrained(
    trained, (X[train], y[train]), val=(X[val], y[val]), swag_epochs=20, swag_lr=0.05
)
laplace = bayesify.Laplace.from_pretrained(trained, (X[train], y[train]), val=(X[val], y[val]))

print("test rows:", len(test), "(standardised units)")
for name, method in [("plain network", plain), ("SWAG", swag), ("Laplace (last layer)", laplace)]:
    pred = method.predict(X[test], samples=50, seed=0)
    rmse = (pred.mean - y[test]).pow(2).mean().sqrt()
    print(f"{name:22s} RMSE {rmse:.3f}  log-likelihood {pred.log_prob(y[test]).mean():+.3f}  "
          f"epistemic std {pred.epistemic_variance.sqrt().mean():.3f}")  # fmt: skip
