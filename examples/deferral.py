"""# Deferral: when not to trust a prediction

A deferral policy is one threshold on an uncertainty score, fitted on validation rows for a
target coverage (the share of rows the model answers) or a target error on the rows it answers;
the rest go to a person. Here MC dropout on scikit-learn's bundled digits, a policy answering
90% of rows, fitted on validation digits and checked on test digits, and the error–coverage
curve of the mutual information.
"""

import matplotlib.pyplot as plt
import torch
from sklearn.datasets import load_digits
from torch import nn

import bayesify
from bayesify.posthoc.deferral import DeferralPolicy

torch.manual_seed(0)
digits = load_digits()
X = torch.as_tensor(digits.data, dtype=torch.float32) / 16
y = torch.as_tensor(digits.target)
order = torch.randperm(len(X), generator=torch.Generator().manual_seed(0))
train, val, test = order[:900], order[900:1300], order[1300:]

net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 10))
dropout = bayesify.MCDropout(net, task="classification")
dropout.fit((X[train], y[train]), epochs=20, batch_size=64, progress=False)

policy = DeferralPolicy.fit(
    dropout.predict(X[val], samples=50, seed=0), y[val], score="mi", target_coverage=0.9
)
pred = dropout.predict(X[test], samples=50, seed=1)
held_out = policy.evaluate(pred, y[test])
print(f"threshold on mutual information: {policy.threshold:.4f} nats")
print(f"test digits answered: {held_out['coverage']:.1%} (target 90%)")
print(f"error on all test digits {held_out['error_all']:.1%}, "
      f"on those answered {held_out['error_accepted']:.1%}")  # fmt: skip

wrong = (pred.mean.argmax(-1) != y[test]).float()
by_doubt = wrong[pred.mutual_information.argsort()]
coverage = torch.arange(1, len(by_doubt) + 1) / len(by_doubt)
error = by_doubt.cumsum(0) / torch.arange(1, len(by_doubt) + 1)
plt.figure(figsize=(5, 3.5))
plt.plot(coverage.numpy(), error.numpy())
plt.axvline(held_out["coverage"], color="k", ls=":", label="the fitted policy")
plt.xlabel("share of test digits answered (least uncertain first)")
plt.ylabel("error on the answered digits")
plt.legend()
plt.tight_layout()
plt.savefig("error_coverage.png", dpi=90)
