"""SWAG's posterior (Maddox et al. 2019): collecting the moments of an SGD trajectory and
drawing weights from the Gaussian they define.

Along SGD from trained weights, every ``collect_every`` steps the weights θ_i (all parameters
flattened, ``[P]``) update the running mean θ̄ and second moment θ̄², and the deviation
θ_i − θ̄ (from the mean just updated, as Maddox et al.'s Algorithm 1 and code) is appended as a
column of D, of which the last K are kept. A draw is

    θ = θ̄ + √scale · (σ ⊙ z₁ + D z₂ / √(K − 1)),   σ² = θ̄² − θ̄²,   z₁ ~ N(0, I_P), z₂ ~ N(0, I_K)

(``scale = 1/2``: Maddox et al.'s θ̄ + Σ_diag^½ z₁/√2 + D z₂/√(2(K−1))), whose covariance is
scale · (diag(σ²) + D Dᵀ / (K − 1)): a diagonal plus a rank-K term, Σ = LLᵀ with a
small-rank L. K is the number of columns collected (at most ``rank``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

from bayesify.options import OptimizerName, SwagSchedule, parse_option
from bayesify.train import make_optimizer, train_loop

#: the smallest diagonal variance a draw uses (float rounding can make θ̄² − θ̄² negative)
MIN_VARIANCE = 1e-30
#: the collecting rate and optimiser when neither is given nor known from ``fit`` (SGD at 0.01)
FALLBACK_RATE = (0.01, OptimizerName.SGD)


def collecting_rate(
    swag_lr: float | None,
    swag_optimizer: OptimizerName | None,
    trained: tuple[float, str] | None,
) -> tuple[float, OptimizerName]:
    """The constant rate and optimiser SWAG collects with: the given ones, else the rate and
    optimiser the network was ``trained`` with by ``fit`` (Maddox et al. 2019 collect at a
    constant rate comparable to the training rate, so the iterates keep exploring the basin),
    else :data:`FALLBACK_RATE`."""
    t_lr, t_opt = FALLBACK_RATE
    if trained is not None:
        t_lr, t_opt = trained[0], parse_option(OptimizerName, trained[1], option="optimizer")
    opt = t_opt if swag_optimizer is None else swag_optimizer
    lr = t_lr if opt is t_opt else FALLBACK_RATE[0]  # a rate is on its own optimiser's scale
    return (lr if swag_lr is None else swag_lr), opt


def parameter_layout(net: nn.Module) -> list[tuple[str, torch.Size]]:
    """The names and shapes of ``net``'s parameters, in the order they are flattened."""
    return [(name, p.shape) for name, p in net.named_parameters()]


def flat_parameters(net: nn.Module) -> Tensor:
    """All of ``net``'s parameters as one vector ``[P]`` (a copy)."""
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def unflatten(theta: Tensor, layout: list[tuple[str, torch.Size]]) -> dict[str, Tensor]:
    """Weights ``[S, P]`` -> ``{name: [S, *shape]}`` (views) for ``layout``."""
    sizes = [math.prod(shape) for _, shape in layout]
    parts = torch.split(theta, sizes, dim=1)
    pairs = zip(layout, parts, strict=True)
    return {name: t.view(len(theta), *shape) for (name, shape), t in pairs}


@dataclass
class Moments:
    """One SWAG trajectory's statistics: ``count`` snapshots, their ``mean`` and
    ``sq_mean`` ``[P]`` and the last ``rank`` deviation columns (oldest first)."""

    rank: int
    count: int = 0
    mean: Tensor | None = None
    sq_mean: Tensor | None = None
    columns: list[Tensor] = field(default_factory=list)

    def add(self, theta: Tensor) -> None:
        """Take snapshot ``theta [P]`` in (Maddox et al.'s Algorithm 1)."""
        theta = theta.detach().reshape(-1)
        n = self.count
        if self.mean is None or self.sq_mean is None:
            self.mean, self.sq_mean = theta.clone(), theta.square()
        else:
            self.mean = self.mean * (n / (n + 1)) + theta / (n + 1)
            self.sq_mean = self.sq_mean * (n / (n + 1)) + theta.square() / (n + 1)
        self.columns = [*self.columns, theta - self.mean][-self.rank :]
        self.count = n + 1

    def means(self) -> tuple[Tensor, Tensor]:
        """``mean`` and ``sq_mean`` ``[P]`` (after a first snapshot)."""
        assert self.mean is not None and self.sq_mean is not None
        return self.mean, self.sq_mean

    def deviations(self) -> Tensor:
        """The kept columns as rows ``[K, P]`` (oldest first), zero rows up to ``rank``."""
        assert self.mean is not None
        out = self.mean.new_zeros(self.rank, len(self.mean))
        if self.columns:
            out[: len(self.columns)] = torch.stack(self.columns)
        return out


def learning_rate(schedule: SwagSchedule, step: int, cycle: int, lr: float, lr_min: float) -> float:
    """The rate of SGD step ``step`` (from 0): ``lr`` (constant), or within each cycle of
    ``cycle`` steps linearly from ``lr`` down to ``lr_min`` at the cycle's last step
    (Izmailov et al. 2018: α = (1 − t) α₁ + t α₂, t = (i mod c + 1) / c)."""
    if schedule is SwagSchedule.CONSTANT:
        return lr
    t = (step % cycle + 1) / cycle
    return (1 - t) * lr + t * lr_min


@dataclass(frozen=True)
class Trajectory:
    """How one SWAG trajectory runs: ``epochs`` of ``optimizer`` (SGD: with ``momentum``;
    weight decay) over ``loader``, the rate by ``schedule``, a snapshot every ``collect_every``
    steps (0: one per epoch, at its end)."""

    epochs: int
    lr: float
    lr_min: float
    schedule: SwagSchedule
    momentum: float
    weight_decay: float
    collect_every: int
    optimizer: OptimizerName = OptimizerName.SGD


def collect(
    net: nn.Module,
    loss: Callable[[Tensor, Tensor], Tensor],
    loader: DataLoader[Any],
    trajectory: Trajectory,
    rank: int,
    param_groups: Callable[[float, float], list[dict[str, Any]]],
    *,
    progress: bool = False,
) -> Moments:
    """SGD on ``net`` from its current weights through the one training loop, taking a
    snapshot into :class:`Moments` every ``collect_every`` steps (``loss(x, y)``: the mean
    data term of a mini-batch). ``net`` ends at the last SGD iterate."""
    tr = trajectory
    cycle = tr.collect_every or max(len(loader), 1)
    moments = Moments(rank)
    optimizer = make_optimizer(param_groups(tr.lr, tr.weight_decay), tr.optimizer, tr.lr,
                               tr.momentum)  # fmt: skip
    step = 0

    def set_rate() -> None:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(tr.schedule, step, cycle, tr.lr, tr.lr_min)

    def after_step() -> None:
        nonlocal step
        step += 1
        if step % cycle == 0:
            moments.add(flat_parameters(net))
        set_rate()

    set_rate()
    train_loop(net, lambda x, y, _p: loss(x, y), loader, optimizer, epochs=tr.epochs,
               after_step=after_step, progress=progress, desc="swag")  # fmt: skip
    return moments


def draw_weights(
    mean: Tensor,
    sq_mean: Tensor,
    deviations: Tensor,
    counts: Tensor,
    seeds: Tensor,
    members: Tensor,
    scale: float,
) -> Tensor:
    """Weights ``[G, P]`` for G sample groups: group g from member ``members[g]``'s Gaussian
    (``mean``/``sq_mean [M, P]``, ``deviations [M, rank, P]``, ``counts [M]`` snapshots),
    with its normals drawn from a CPU generator seeded ``seeds[g]`` (z₁ ``[P]`` then z₂ ``[K]``),
    so a group's weights depend neither on which other groups are drawn with it nor on the
    device."""
    g, p = len(seeds), mean.shape[1]
    k_max = deviations.shape[1]
    z1 = torch.empty(g, p, dtype=mean.dtype)  # drawn on the CPU: the same draws on any device
    z2 = torch.empty(g, k_max, dtype=mean.dtype)
    gen = torch.Generator()
    for i, seed in enumerate(seeds.tolist()):
        gen.manual_seed(int(seed))
        z1[i].normal_(generator=gen)
        z2[i].normal_(generator=gen)
    z1, z2 = z1.to(mean.device), z2.to(mean.device)
    for m in torch.unique(members).tolist():
        whole = bool((members == m).all())
        rows = None if whole else (members == m).nonzero().squeeze(1)
        zm = z1 if rows is None else z1[rows]  # [g_m, P], turned into weights in place
        k = min(int(counts[m]), k_max)
        zm.mul_((sq_mean[m] - mean[m].square()).clamp_min(MIN_VARIANCE).sqrt())
        if k >= 2:
            zm.addmm_(z2[:, :k] if rows is None else z2[rows, :k], deviations[m, :k],
                      alpha=1 / math.sqrt(k - 1))  # fmt: skip
        zm.mul_(math.sqrt(scale)).add_(mean[m])
        if rows is not None:
            z1[rows] = zm
    return z1  # [G, P]
