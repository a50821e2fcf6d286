"""Packed-Ensembles' layers (Laurent et al. 2023): M members packed into one network.

Every ``nn.Linear``/``nn.Conv2d`` of a network becomes a grouped layer whose width is ``alpha``
times the original (rounded up to a multiple of its groups), split into M members and each
member into ``gamma`` groups: member m owns the m-th block of every layer's features, and no
weight connects two members. The first layer reads the shared input whole (one group, its
output split by member); the last gives each member the original outputs, ``[N, M*out]``
member-major, read as ``[M, N, out]`` by :func:`members_first`. Batch norm, pooling, flatten,
dropout and activations act per channel or per feature, so they stay per member once widened.

:func:`member_network` cuts member m out of a packed network as a plain ``nn.Sequential`` of
``nn.Linear``/``nn.Conv2d``/batch norm with its exact weights (the reference one pass must
agree with, and what each member is).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: layers that act per feature or per channel: kept as they are
ELEMENTWISE = (
    nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Softplus, nn.Mish,
    nn.Hardtanh, nn.ReLU6, nn.Identity, nn.Dropout, nn.Dropout2d, nn.MaxPool2d, nn.AvgPool2d,
    nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d,
)  # fmt: skip
NORMS = (nn.BatchNorm1d, nn.BatchNorm2d)


class PackedLinear(nn.Module):
    """A linear layer of ``groups`` blocks: ``x [N, groups*in_g]`` -> ``[N, groups*out_g]``,
    block g's outputs from block g's inputs only (the packed network's first layer, one
    group, is a plain ``nn.Linear``). ``weight
    [groups, out_g, in_g]``, ``bias [groups*out_g]``; each block starts as a fresh
    ``nn.Linear(in_g, out_g)`` would (uniform in ±1/sqrt(in_g))."""

    def __init__(self, in_features: int, out_features: int, groups: int, bias: bool = True):
        super().__init__()
        if groups < 1 or in_features % groups or out_features % groups:
            raise ValueError(
                f"{in_features} inputs and {out_features} outputs do not split into {groups} groups"
            )
        self.in_features, self.out_features, self.groups = in_features, out_features, groups
        in_g, out_g = in_features // groups, out_features // groups
        bound = 1 / math.sqrt(in_g)
        self.weight = nn.Parameter(torch.empty(groups, out_g, in_g).uniform_(-bound, bound))
        self.bias = (
            nn.Parameter(torch.empty(out_features).uniform_(-bound, bound)) if bias else None
        )

    def forward(self, x: Tensor) -> Tensor:
        """``x [N, in]`` -> ``[N, out]``."""
        if self.groups == 1:
            return F.linear(x, self.weight[0], self.bias)
        g, out_g, in_g = self.weight.shape
        xg = x.reshape(-1, g, in_g).transpose(0, 1)  # [G, N, in_g]
        out = torch.bmm(xg, self.weight.transpose(1, 2)).transpose(0, 1).reshape(-1, g * out_g)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, " + (
            f"groups={self.groups}, bias={self.bias is not None}"
        )


class PackedConv2d(nn.Conv2d):
    """An ``nn.Conv2d`` with groups whose CPU forward runs its groups one by one: torch's
    grouped convolution kernel was about 2.5 times slower on CPU than the same groups as
    separate convolutions (benchmarks/packed_ensemble.md); elsewhere torch's own."""

    def forward(self, x: Tensor) -> Tensor:
        if self.groups == 1 or x.device.type != "cpu" or self.padding_mode != "zeros":
            return super().forward(x)
        g = self.groups
        biases = self.bias.chunk(g) if self.bias is not None else [None] * g
        parts = [
            F.conv2d(xg, wg, bg, self.stride, self.padding, self.dilation)
            for xg, wg, bg in zip(x.chunk(g, 1), self.weight.chunk(g), biases, strict=True)
        ]
        return torch.cat(parts, 1)


@dataclass(frozen=True)
class Packing:
    """How a network was packed: M members, width factor ``alpha``, ``gamma`` groups per
    member; per original layer its packed input and output widths."""

    members: int
    alpha: float
    gamma: int
    widths: tuple[tuple[int, int], ...]


def _children(net: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
    """``(parent, name, leaf)`` in forward order through nested ``nn.Sequential``s."""
    out = []
    for name, child in net.named_children():
        if type(child) is nn.Sequential:
            out += _children(child)
        else:
            out.append((net, name, child))
    return out


def _check_leaf(module: nn.Module) -> None:
    if isinstance(module, (*ELEMENTWISE, *NORMS)) or type(module) in (nn.Linear, nn.Conv2d):
        if isinstance(module, nn.Conv2d) and module.groups != 1:
            raise ValueError(f"Packed-Ensembles packs ungrouped convolutions, got {module}")
        return
    if isinstance(module, nn.Flatten) and module.start_dim == 1:
        return
    raise ValueError(
        f"Packed-Ensembles packs an nn.Sequential of Linear, Conv2d, batch norm, pooling, "
        f"flatten, dropout and activation layers; {type(module).__name__} would mix members"
    )


def pack_network(net: nn.Module, members: int, alpha: float, gamma: int) -> Packing:
    """Swap every layer of the ``nn.Sequential`` ``net`` for its packed version, in place.

    Widths: ``alpha * width`` rounded up to a multiple of ``members * gamma``; the first
    layer has one group (the shared input), the hidden ones ``members * gamma``, the last
    ``members`` with ``members * out`` outputs. New weights are drawn from torch's global RNG
    (seed it, e.g. with :func:`bayesify.seeding.seeded`)."""
    if type(net) is not nn.Sequential:
        raise ValueError(f"Packed-Ensembles packs an nn.Sequential, got {type(net).__name__}")
    leaves = _children(net)
    for _, _, module in leaves:
        _check_leaf(module)
    weighted = [i for i, (_, _, m) in enumerate(leaves) if type(m) in (nn.Linear, nn.Conv2d)]
    if not weighted:
        raise ValueError(
            "Packed-Ensembles needs nn.Linear or nn.Conv2d layers; the network has none"
        )
    step = members * gamma
    # the feature/channel widths flowing in: original, packed
    orig_c: int | None = None
    packed_c: int | None = None
    widths: list[tuple[int, int]] = []
    for i, (parent, name, module) in enumerate(leaves):
        first, last = i == weighted[0], i == weighted[-1]
        if isinstance(module, NORMS):
            if orig_c is None or module.num_features != orig_c:
                raise ValueError(f"{module} does not follow a packed layer of its width")
            setattr(parent, name, _widened_norm(module, packed_c))
            continue
        if not isinstance(module, nn.Linear | nn.Conv2d):
            continue
        if isinstance(module, nn.Conv2d):
            n_in, n_out = module.in_channels, module.out_channels
        else:
            n_in, n_out = module.in_features, module.out_features
        if first:
            p_in = n_in
        elif orig_c is None or packed_c is None or n_in % orig_c:
            raise ValueError(f"{module}'s inputs do not follow the packed layer before it")
        else:
            p_in = n_in // orig_c * packed_c  # flattened channels keep their spatial size
        p_out = members * n_out if last else step * math.ceil(alpha * n_out / step)
        groups = 1 if first else (members if last else step)
        bias = module.bias is not None
        new: nn.Module
        if isinstance(module, nn.Conv2d):
            conv = nn.Conv2d if groups == 1 else PackedConv2d
            new = conv(p_in, p_out, module.kernel_size, module.stride,  # type: ignore[arg-type]
                       module.padding, module.dilation, groups, bias,  # type: ignore[arg-type]
                       module.padding_mode)  # fmt: skip
        elif groups == 1:  # the first layer: a plain dense layer, its outputs split by member
            new = nn.Linear(p_in, p_out, bias)
        else:
            new = PackedLinear(p_in, p_out, groups, bias)
        setattr(parent, name, new.to(module.weight))
        orig_c, packed_c = n_out, p_out
        widths.append((p_in, p_out))
    return Packing(members, alpha, gamma, tuple(widths))


def _widened_norm(norm: nn.Module, width: int | None) -> nn.Module:
    assert isinstance(norm, NORMS) and width is not None
    new = type(norm)(width, norm.eps, norm.momentum, norm.affine, norm.track_running_stats)
    like = [t for t in norm.state_dict().values() if t.is_floating_point()]
    return new.to(like[0]) if like else new


def members_first(out: Tensor, members: int) -> Tensor:
    """The packed network's output ``[N, M*out, ...]`` -> ``[M, N, out, ...]``."""
    n, width = out.shape[0], out.shape[1]
    return out.reshape(n, members, width // members, *out.shape[2:]).transpose(0, 1)


def member_network(net: nn.Module, member: int, members: int) -> nn.Sequential:
    """Member ``member`` of the packed ``net`` as a plain ``nn.Sequential`` with its own weights
    (copies): ``nn.Linear`` (its groups as a block-diagonal weight), ``nn.Conv2d`` (its groups),
    batch norm on its channels, the other layers as they are."""
    layers: list[nn.Module] = []
    for _, _, module in _children(net):
        if isinstance(module, PackedLinear | nn.Linear):
            layers.append(_member_linear(module, member, members))
        elif isinstance(module, nn.Conv2d):
            layers.append(_member_conv(module, member, members))
        elif isinstance(module, NORMS):
            layers.append(_member_norm(module, member, members))
        else:
            layers.append(copy.deepcopy(module))
    return nn.Sequential(*layers)


def _block(size: int, member: int, members: int) -> slice:
    k = size // members
    return slice(member * k, (member + 1) * k)


def _member_linear(layer: PackedLinear | nn.Linear, member: int, members: int) -> nn.Linear:
    rows = _block(layer.out_features, member, members)
    if isinstance(layer, nn.Linear):  # the first layer: the member's rows over the whole input
        w = layer.weight[rows]
    else:
        w = torch.block_diag(*layer.weight[_block(layer.groups, member, members)])  # type: ignore[no-untyped-call]
    lin = nn.Linear(w.shape[1], w.shape[0], bias=layer.bias is not None).to(w)
    with torch.no_grad():
        lin.weight.copy_(w)
        if layer.bias is not None:
            lin.bias.copy_(layer.bias[rows])
    return lin


def _member_conv(conv: nn.Conv2d, member: int, members: int) -> nn.Conv2d:
    rows = _block(conv.out_channels, member, members)
    groups = max(conv.groups // members, 1)
    n_in = conv.in_channels if conv.groups == 1 else conv.in_channels // members
    new = nn.Conv2d(n_in, rows.stop - rows.start, conv.kernel_size, conv.stride,  # type: ignore[arg-type]
                    conv.padding, conv.dilation, groups, conv.bias is not None,  # type: ignore[arg-type]
                    conv.padding_mode).to(conv.weight)  # fmt: skip
    with torch.no_grad():
        new.weight.copy_(conv.weight[rows])
        if conv.bias is not None and new.bias is not None:
            new.bias.copy_(conv.bias[rows])
    return new


def _member_norm(norm: nn.Module, member: int, members: int) -> nn.Module:
    assert isinstance(norm, NORMS)
    rows = _block(norm.num_features, member, members)
    new = type(norm)(rows.stop - rows.start, norm.eps, norm.momentum, norm.affine,
                     norm.track_running_stats)  # fmt: skip
    state = {k: v[rows] if v.dim() == 1 else v.clone() for k, v in norm.state_dict().items()}
    new.load_state_dict(state)
    return new.train(norm.training)
