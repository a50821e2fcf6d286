"""# MC dropout: knowing what it has not seen

MC dropout (Gal & Ghahramani 2016) keeps dropout on at prediction time; the spread of the
class probabilities over the T masks is the model's doubt. Trained on scikit-learn's bundled
8×8 handwritten digits, the mutual information between the label and the masks is higher on
digits turned upside down (inputs unlike the training data) than on the test digits, and
higher on the test digits it gets wrong than on those it gets right.
"""

import matplotlib.pyplot as plt
import torch
from sklearn.datasets import load_digits
from torch import nn

import bayesify

torch.manual_seed(0)
digits = load_digits()
X = torch.as_tensor(digits.data, dtype=torch.float32) / 16
y = torch.as_tensor(digits.target)
order = torch.randperm(len(X), generator=torch.Generator().manual_seed(0))
train, test = order[:1200], order[1200:]

net = nn.Sequential(
    nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 128), nn.ReLU(),
    nn.Dropout(0.25), nn.Linear(128, 10),
)  # fmt: skip
dropout = bayesify.MCDropout(net, task="classification")
dropout.fit((X[train], y[train]), epochs=30, batch_size=64, progress=False)

pred = dropout.predict(X[test], samples=50, seed=0)
flipped = X[test].reshape(-1, 8, 8).flip(1).reshape(-1, 64)  # upside down
unseen = dropout.predict(flipped, samples=50, seed=0)
right = pred.mean.argmax(-1) == y[test]
print(f"test accuracy {right.float().mean():.1%}, NLL {pred.log_prob(y[test]).neg().mean():.3f}")
print("mean mutual information (nats):")
print(f"  test digits it gets right  {pred.mutual_information[right].mean():.3f}")
print(f"  test digits it gets wrong  {pred.mutual_information[~right].mean():.3f}")
print(f"  digits upside down         {unseen.mutual_information.mean():.3f}")

plt.figure(figsize=(6, 3.5))
bins = torch.linspace(0, float(unseen.mutual_information.max()), 30).numpy()
plt.hist(pred.mutual_information.numpy(), bins=bins, alpha=0.6, label="test digits")
plt.hist(unseen.mutual_information.numpy(), bins=bins, alpha=0.6, label="upside down")
plt.xlabel("mutual information (nats)")
plt.ylabel("digits")
plt.legend()
plt.tight_layout()
plt.savefig("mutual_information.png", dpi=90)
