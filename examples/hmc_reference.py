"""# How close to the true posterior? An HMC reference on a 1-D toy

For a small network the posterior over all its weights can be sampled exactly enough with
Hamiltonian Monte Carlo (`bayesify.reference.sample_posterior`: NumPyro's NUTS, the `hmc`
extra). Here a tanh network on two clusters of points with a gap between them: HMC's
predictive band beside those of MC dropout and last-layer Laplace, and the ratio of each
one's spread to HMC's inside the data and in the gap (below 1: overconfident).
"""

import matplotlib.pyplot as plt
import torch
from torch import nn

import bayesify
from bayesify.reference.hmc import HMCConfig, sample_posterior

g = torch.Generator().manual_seed(0)
x = torch.cat([torch.rand(20, 1, generator=g) * 1.5 - 2.5, torch.rand(20, 1, generator=g) + 1.0])
y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(40, generator=g)
grid = torch.linspace(-3.5, 3, 200).unsqueeze(1)
gap = (grid[:, 0] > -0.8) & (grid[:, 0] < 0.8)
inside = ((grid[:, 0] > -2.5) & (grid[:, 0] < -1.0)) | ((grid[:, 0] > 1.0) & (grid[:, 0] < 2.0))


def tanh_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1, 20), nn.Tanh(), nn.Linear(20, 1))


reference = sample_posterior(
    tanh_net(), x, y, "regression", HMCConfig(noise_std=0.1, chains=2, warmup=300, samples=200)
)
hmc = reference.predictive(tanh_net(), grid)
print(f"HMC: {reference.chains} chains, {reference.theta.shape[-2]} draws each")

fit = dict(epochs=300, batch_size=40, lr=1e-2, progress=False)
dropout_net = nn.Sequential(nn.Linear(1, 50), nn.Tanh(), nn.Dropout(0.1), nn.Linear(50, 1))
dropout = bayesify.MCDropout(dropout_net).fit((x, y), val=(x, y), **fit)
plain = bayesify.Deterministic(tanh_net()).fit((x, y), val=(x, y), **fit)
laplace = bayesify.Laplace.from_pretrained(plain.net, (x, y), val=(x, y))

plt.figure(figsize=(7, 3.8))
hmc_std = hmc.epistemic_variance.sqrt()
bands = [("HMC", hmc, "k"),
         ("MC dropout", dropout.predict(grid, samples=200, seed=0), "C0"),
         ("Laplace", laplace.predict(grid, samples=200, seed=0), "C1")]  # fmt: skip
for name, pred, colour in bands:
    std = pred.epistemic_variance.sqrt()
    if name != "HMC":
        inside_ratio = (std[inside] / hmc_std[inside]).mean()
        gap_ratio = (std[gap] / hmc_std[gap]).mean()
        print(f"{name:10s} spread / HMC's: {inside_ratio:.2f} inside the data, "
              f"{gap_ratio:.2f} in the gap")  # fmt: skip
    plt.plot(grid[:, 0], pred.mean, color=colour, label=name)
    plt.fill_between(grid[:, 0], pred.mean - 2 * std, pred.mean + 2 * std, color=colour, alpha=0.15)
plt.plot(x[:, 0], y, ".", color="k")
plt.ylim(-3, 3)
plt.legend(loc="lower right")
plt.title("mean ± 2 epistemic std")
plt.tight_layout()
plt.savefig("bands.png", dpi=90)
