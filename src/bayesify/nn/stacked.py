"""Several weight settings of one network run together: ``functional_call`` under ``vmap``.

A deep ensemble's M members and SWAG's T weight samples are the same network with different
parameters (and buffers). :func:`stacked_call` runs them as one vectorised pass: parameters
stacked on a leading axis ``[S, ...]``, the rows shared (``x [n, ...]``) or per setting
(``x [S, n, ...]``), outputs ``[S, n, ...]``. :func:`batchnorm_statistics` gives every batch-norm
layer the statistics of given rows under each setting (what a pass in train mode with
``momentum=None`` would record), so weight samples can be normalised with their own.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap
from torch.nn.modules.batchnorm import _BatchNorm


def stacked_call(
    base: nn.Module,
    params: Mapping[str, Tensor],
    buffers: Mapping[str, Tensor],
    x: Tensor,
    *,
    x_dim: int | None = None,
    buffer_dim: int | None = 0,
) -> Tensor:
    """``base`` with S parameter settings ``params [S, ...]`` on ``x``: ``[S, n, ...]``.

    ``x_dim``: None when every setting reads the same rows ``x [n, ...]``, 0 when setting s
    reads ``x[s]``; ``buffer_dim``: 0 when the buffers are stacked too, None when shared."""

    def run(p: Mapping[str, Tensor], b: Mapping[str, Tensor], xs: Tensor) -> Tensor:
        return functional_call(base, (dict(p), dict(b)), (xs,))

    return vmap(run, in_dims=(0, buffer_dim, x_dim))(params, buffers, x)


def batchnorm_layers(net: nn.Module) -> list[tuple[str, _BatchNorm]]:
    """The ``BatchNorm1d/2d/3d`` layers of ``net`` with their names."""
    return [(n, m) for n, m in net.named_modules() if isinstance(m, _BatchNorm)]


def batchnorm_statistics(
    base: nn.Module,
    params: Mapping[str, Tensor],
    buffers: Mapping[str, Tensor],
    rows: Tensor,
) -> dict[str, Tensor]:
    """Per setting of ``params [S, ...]``, every batch-norm layer's mean and unbiased variance
    of its inputs when ``rows [R, ...]`` run through ``base`` normalised by their own batch
    statistics (as in train mode): ``{"<layer>.running_mean": [S, C], "<layer>.running_var":
    [S, C]}``, the running statistics one train-mode pass with ``momentum=None`` leaves.
    ``buffers`` are shared by the settings; ``base`` runs in its current mode otherwise."""
    layers = batchnorm_layers(base)

    def run(p: Mapping[str, Tensor]) -> dict[str, Tensor]:
        stats: dict[str, Tensor] = {}
        handles = [m.register_forward_hook(_batch_norm_hook(name, stats)) for name, m in layers]
        try:
            functional_call(base, (dict(p), dict(buffers)), (rows,))
        finally:
            for h in handles:
                h.remove()
        return stats

    return vmap(run)(params)


def _batch_norm_hook(name: str, stats: dict[str, Tensor]):  # noqa: ANN202 - a forward hook
    """A forward hook that replaces a batch-norm layer's output by its input normalised with
    its own batch statistics, and keeps those statistics in ``stats``."""

    def hook(module: _BatchNorm, args: tuple[Tensor, ...], _out: Tensor) -> Tensor:
        x = args[0]
        dims = [0, *range(2, x.dim())]
        shape = [1, -1] + [1] * (x.dim() - 2)  # [C] over [R, C, ...]
        mean, var = x.mean(dims), x.var(dims, unbiased=False)
        y = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + module.eps)
        if module.weight is not None:
            y = y * module.weight.view(shape) + module.bias.view(shape)
        n = x.numel() // x.shape[1]
        stats[f"{name}.running_mean"] = mean
        stats[f"{name}.running_var"] = var * (n / max(n - 1, 1))
        return y

    return hook
