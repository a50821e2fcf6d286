"""# Laplace: a Gaussian around weights you already trained, from the loss's curvature

`bayesify.Laplace.from_pretrained` (MacKay 1992; Daxberger et al. 2021) reads the curvature of
the training loss at your trained weights and puts a Gaussian there, its prior precision chosen
by the marginal likelihood. Here a one-dimensional regression whose training inputs leave a gap
in the middle: over the last layer only (the default) and over all layers, the band of two
epistemic standard deviations around the mean. A posterior that knows where it saw no data widens
in the gap.
"""

import matplotlib.pyplot as plt
import torch
from torch import nn

import bayesify

torch.manual_seed(0)
x = torch.cat([torch.rand(80) * 2 - 3, torch.rand(80) * 2 + 1])[:, None]  # [-3,-1] and [1,3]
y = torch.sin(1.5 * x[:, 0]) + 0.1 * torch.randn(len(x))
val_x = torch.linspace(-3, 3, 40)[(torch.linspace(-3, 3, 40).abs() > 1)][:, None]
val = (val_x, torch.sin(1.5 * val_x[:, 0]) + 0.1 * torch.randn(len(val_x)))

net = nn.Sequential(nn.Linear(1, 50), nn.Tanh(), nn.Linear(50, 50), nn.Tanh(), nn.Linear(50, 1))
trained = bayesify.Deterministic(net).fit((x, y), val=val, epochs=300, lr=1e-2, progress=False).net

grid = torch.linspace(-5, 5, 201)[:, None]
gap, near = grid[:, 0].abs() < 0.8, (grid[:, 0].abs() > 1.2) & (grid[:, 0].abs() < 2.8)
fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
for ax, subset in zip(axes, ["last-layer", "all"], strict=True):
    laplace = bayesify.Laplace.from_pretrained(trained, (x, y), val=val, subset=subset)
    pred = laplace.predict(grid, samples=200, seed=0)
    std, noise = pred.epistemic_variance.sqrt(), pred.aleatoric_variance.sqrt().mean()
    print(
        f"{subset:10s} epistemic std: {std[near].mean():.3f} beside the data, "
        f"{std[gap].mean():.3f} in the gap, noise std {noise:.3f}"
    )
    ax.fill_between(grid[:, 0], pred.mean - 2 * std, pred.mean + 2 * std, alpha=0.3,
                    label="mean ± 2 epistemic std")  # fmt: skip
    ax.plot(grid[:, 0], pred.mean, label="predictive mean")
    ax.plot(x[:, 0], y, ".", color="k", markersize=3, label="training rows")
    ax.set_title(f"Laplace, {subset}")
    ax.set_xlabel("x")
axes[0].set_ylabel("y")
axes[0].legend(loc="lower left", fontsize=8)
fig.tight_layout()
fig.savefig("laplace_gap.png", dpi=90)
