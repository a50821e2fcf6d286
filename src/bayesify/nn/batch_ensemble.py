"""BatchEnsemble layers (Wen, Tran & Ba 2020): one shared weight W and, per member i, rank-1
fast weights ``r_i`` (inputs), ``s_i`` (outputs) and a bias ``b_i``.

Member i computes ``((x ∘ r_i) W) ∘ s_i + b_i``, i.e. the weight ``W ∘ (s_i r_iᵀ)``, for a
linear layer; for a convolution ``r_i`` scales the input channels and ``s_i``, ``b_i`` the output
channels. Inside a sampling block of G groups, group g of the ``G*n`` rows runs member
``(first + g) mod M`` (``first``: the first group of the range selected), so T = M samples are the
M members, and T = K·M repeats each member K times in k-major order. Outside a sampling block
every row runs member 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.nn.stochastic import SamplingPlan, StochasticModule

#: how the members' fast weights start: N(1, std²) ("normal") or random signs ±1 ("sign")
INITS = ("normal", "sign")


class BatchEnsembleLayer(StochasticModule):
    """An ``nn.Linear`` or ``nn.Conv2d`` (``layer``, whose weight becomes the shared W; its bias
    is replaced by one per member) with M members' rank-1 fast weights."""

    _plain_attrs = StochasticModule._plain_attrs | {"first", "_index_cache"}

    def __init__(self, layer: nn.Linear | nn.Conv2d, members: int) -> None:
        super().__init__()
        if not isinstance(layer, nn.Linear | nn.Conv2d):
            raise TypeError(f"BatchEnsembleLayer wraps nn.Linear or nn.Conv2d, got {layer}")
        if members < 1:
            raise ValueError(f"members must be >= 1, got {members}")
        n_in, n_out = layer.weight.shape[1], layer.weight.shape[0]
        if isinstance(layer, nn.Conv2d):
            n_in, n_out = layer.in_channels, layer.out_channels
        like = layer.weight
        bias = layer.bias
        layer.bias = None
        self.layer = layer
        self.members = members
        self.first = 0
        self._index_cache: dict[tuple[int, int, torch.device], Tensor] = {}
        self.r = nn.Parameter(torch.ones(members, n_in, dtype=like.dtype, device=like.device))
        self.s = nn.Parameter(torch.ones(members, n_out, dtype=like.dtype, device=like.device))
        b = torch.zeros(members, n_out, dtype=like.dtype, device=like.device)
        if bias is not None:
            b = b + bias.detach()
        self.bias = nn.Parameter(b)

    def init_fast_weights(self, init: str, std: float, generator: torch.Generator) -> None:
        """Draw ``r`` and ``s`` of every member: N(1, std²) or random signs ±1."""
        if init not in INITS:
            raise ValueError(f"unknown fast-weight init {init!r}; valid: {', '.join(INITS)}")
        with torch.no_grad():
            for p in (self.r, self.s):
                if init == "normal":
                    draw = 1.0 + std * torch.randn(p.shape, generator=generator)
                else:
                    draw = torch.randint(0, 2, p.shape, generator=generator) * 2.0 - 1.0
                p.copy_(draw.to(p))

    def begin_sampling(self, plan: SamplingPlan) -> None:
        super().begin_sampling(plan)
        self.first = 0

    def select_groups(self, start: int, stop: int) -> None:
        super().select_groups(start, stop)
        self.first = start

    def end_sampling(self) -> None:
        super().end_sampling()
        self.first = 0

    def _factors(self, groups: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """``r [G, in]``, ``s [G, out]``, ``b [G, out]`` of the members the G groups run."""
        if self.first == 0 and groups == self.members:
            return self.r, self.s, self.bias
        key = (self.first, groups, device)
        idx = self._index_cache.get(key)
        if idx is None:
            idx = (self.first + torch.arange(groups, device=device)) % self.members
            self._index_cache = {key: idx}
        return self.r[idx], self.s[idx], self.bias[idx]

    def forward(self, x: Tensor) -> Tensor:
        """``x [G*n, in, ...]`` -> ``[G*n, out, ...]``, group g by member ``(first+g) mod M``."""
        groups = self.groups if self.stochastic else 1
        if x.shape[0] % groups:
            raise ValueError(f"{x.shape[0]} rows do not split into {groups} sample groups")
        r, s, b = self._factors(groups, x.device)
        w = self.layer.weight
        if isinstance(self.layer, nn.Linear):
            xg = x.reshape(groups, -1, x.shape[-1])  # [G, n, in]
            n, (n_out, n_in) = xg.shape[1], w.shape
            if n_out * n_in <= n * (n_in + n_out):  # the members' weights cost less than rows
                wg = w * s[:, :, None] * r[:, None, :]  # [G, out, in]: W ∘ s rᵀ
                out = torch.baddbmm(b[:, None, :], xg, wg.transpose(1, 2))
            else:
                out = F.linear(xg * r[:, None, :], w) * s[:, None, :] + b[:, None, :]
            return out.reshape(*x.shape[:-1], n_out)
        shape = (groups, 1, -1, 1, 1)  # channels of a group's rows: [G, 1, C, 1, 1]
        xg = x.reshape(groups, -1, *x.shape[1:]) * r.view(shape)
        h: Tensor = self.layer(xg.reshape(x.shape))
        out = h.reshape(groups, -1, *h.shape[1:]) * s.view(shape) + b.view(shape)
        return out.reshape(h.shape)


def convert_layers(net: nn.Module, members: int, conv: bool = True) -> list[BatchEnsembleLayer]:
    """Swap every ``nn.Linear`` (and ``nn.Conv2d`` when ``conv``) of ``net`` for a
    :class:`BatchEnsembleLayer` around it, in place; returns the new layers."""
    kinds = (nn.Linear, nn.Conv2d) if conv else (nn.Linear,)
    swaps = [(parent, name, child)
             for parent in net.modules()
             for name, child in parent.named_children()
             if type(child) in kinds and isinstance(child, nn.Linear | nn.Conv2d)]  # fmt: skip
    if not swaps:
        raise ValueError("BatchEnsemble needs nn.Linear or nn.Conv2d layers; the network has none")
    layers = []
    for parent, name, child in swaps:
        layer = BatchEnsembleLayer(child, members)
        setattr(parent, name, layer)
        layers.append(layer)
    return layers


def member_forward_reference(layer: BatchEnsembleLayer, x: Tensor, member: int) -> Tensor:
    """Member ``member``'s output on ``x`` with its full weight ``W ∘ (s rᵀ)`` built explicitly
    (the definition the batched forward must agree with; tests use it)."""
    w = layer.layer.weight
    r, s, b = layer.r[member], layer.s[member], layer.bias[member]
    if isinstance(layer.layer, nn.Conv2d):
        full = w * s.view(-1, 1, 1, 1) * r.view(1, -1, 1, 1)
        c = layer.layer
        return F.conv2d(x, full, b, c.stride, c.padding, c.dilation, c.groups)
    return F.linear(x, w * torch.outer(s, r), b)
