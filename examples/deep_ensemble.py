"""# A deep ensemble of networks you trained

Train a few networks from different seeds as you always would, then hand them to
`bayesify.DeepEnsemble.from_pretrained`: each member is used as it is, and their disagreement
is the epistemic part of the predictive. On scikit-learn's bundled breast-cancer data
(569 tumours, 30 features), the rows where the members disagree most are where the ensemble errs.
"""

import torch
from sklearn.datasets import load_breast_cancer
from torch import nn

import bayesify

X, y = load_breast_cancer(return_X_y=True)
X, y = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y)
order = torch.randperm(len(X), generator=torch.Generator().manual_seed(0))
train, test = order[:400], order[400:]
X = (X - X[train].mean(0)) / X[train].std(0)

nets = []
for seed in range(5):  # your own training loop: bayesify is not involved yet
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(30, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(60):
        opt.zero_grad()
        nn.functional.cross_entropy(net(X[train]), y[train]).backward()
        opt.step()
    nets.append(net)

ensemble = bayesify.DeepEnsemble.from_pretrained(nets, task="classification")
pred = ensemble.predict(X[test], samples=5)  # one sample per member
wrong = pred.mean.argmax(-1) != y[test]
print(f"test accuracy {1 - wrong.float().mean():.1%} on {len(test)} tumours, "
      f"NLL {pred.log_prob(y[test]).neg().mean():.3f}")  # fmt: skip
mi = pred.mutual_information
print(f"members' disagreement (mutual information): {mi[~wrong].mean():.4f} nats where right, "
      f"{mi[wrong].mean():.4f} where wrong")  # fmt: skip
doubt = mi.argsort(descending=True)[:10]
print(f"errors among the 10 rows of most disagreement: {int(wrong[doubt].sum())} "
      f"(of {int(wrong.sum())} errors in all)")  # fmt: skip
