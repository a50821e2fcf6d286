"""MC dropout that knows the sample axis, and per-row noise that is independent of chunking.

Inside :func:`bayesify.nn.sampling` every row of the ``T*N`` batch gets its own dropout mask;
outside it, :class:`MCDropout` is exactly ``nn.Dropout`` (masks in ``.train()``, identity in
``.eval()``). Sampling never touches ``.train()``/``.eval()``, so batch norm stays in inference
mode while the masks are drawn.

Per-row randomness comes from :class:`RowNoise`, a counter-based generator: the random number
for (sample group t, data row i, element j) is a hash of (key_t, i, j), where the per-group keys
``[T]`` are drawn from the caller's generator in ``begin_sampling``. Hence

* the same generator gives the same masks;
* chunking the N rows (``max_rows``) does not change them: the layer counts the rows it has seen
  in the current sampling block, so row i keeps its index whatever chunk it falls in;
* the reference loop replays group t exactly with :meth:`RowNoise.select_group` (key_t alone).

A noise layer must be called once per forward pass (no weight sharing of the same instance).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.nn.stochastic import StochasticModule, sampling, stochastic_modules

_M32 = 0xFFFFFFFF
_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)


def _mul32(x: Tensor, c: int) -> Tensor:
    """``(x * c) mod 2**32`` for int64 ``x`` in ``[0, 2**32)`` without int64 overflow."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _M32


def _mix32(x: Tensor) -> Tensor:
    """A bijective 32-bit integer mixer (xor-shift-multiply), on int64 values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def hash_uniform(keys: Tensor, rows: Tensor, features: int, stream: int = 0) -> Tensor:
    """Uniforms in (0, 1) ``[T, n, features]`` from group keys ``[T]`` and row indices ``[n]``.

    Deterministic in (key, row, feature, stream): the counter-based generator behind
    :class:`RowNoise`.
    """
    j = torch.arange(features, device=rows.device, dtype=torch.int64)
    counter = rows.view(-1, 1) * features + j  # [n, F], unique per (row, feature)
    lo, hi = counter & _M32, (counter >> 32) & _M32
    k = keys.view(-1, 1, 1)  # [T, 1, 1]
    h = _mix32((lo ^ _mix32((k + stream * 0x9E3779B9) & _M32)) & _M32)  # [T, n, F]
    h = _mix32(h ^ _mix32(hi ^ k))
    return (h.double() + 0.5) * 2.0**-32  # strictly inside (0, 1)


class RowNoise:
    """Per-row random numbers for ``T`` sample groups, invariant to chunking (see module doc)."""

    def __init__(self) -> None:
        self.keys: Tensor | None = None  # [T] int64 in [0, 2**32), the groups now in use
        self.all_keys: Tensor | None = None  # [T] every group's key of this sampling block
        self.offset = 0  # data rows already seen in this sampling block

    def begin(self, samples: int, generator: torch.Generator | None) -> None:
        """Draw one key per sample group from ``generator``."""
        self.keys = torch.randint(0, 2**32, (samples,), generator=generator, dtype=torch.int64)
        self.all_keys, self.offset = self.keys, 0

    def end(self) -> None:
        self.keys, self.all_keys, self.offset = None, None, 0

    def select_group(self, t: int) -> None:
        """Replay only group ``t`` (the reference loop): one key, row count restarted."""
        if self.all_keys is None:
            raise RuntimeError("select_group needs an active sampling block")
        self.keys, self.offset = self.all_keys[t : t + 1], 0

    def _rows(self, total_rows: int, device: torch.device) -> Tensor:
        if self.keys is None:
            raise RuntimeError("RowNoise used outside a sampling block")
        groups = len(self.keys)
        if total_rows % groups:
            raise ValueError(f"{total_rows} rows do not split into {groups} sample groups")
        n = total_rows // groups
        return torch.arange(self.offset, self.offset + n, device=device)

    def uniform(self, total_rows: int, features: int, device: torch.device, stream: int = 0):
        """Uniforms ``[T*n, features]`` (float64) for a pass over ``T*n`` rows."""
        rows = self._rows(total_rows, device)
        u = hash_uniform(self.keys.to(device), rows, features, stream)
        return u.reshape(total_rows, features)

    def normal(self, total_rows: int, features: int, device: torch.device, stream: int = 0):
        """Standard normals ``[T*n, features]`` (float64, Box-Muller on two streams)."""
        u1 = self.uniform(total_rows, features, device, 2 * stream + 1)
        u2 = self.uniform(total_rows, features, device, 2 * stream + 2)
        return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)

    def advance(self, total_rows: int) -> None:
        """Count the data rows of a finished pass (call once per forward)."""
        if self.keys is not None:
            self.offset += total_rows // len(self.keys)


class RowNoiseModule(StochasticModule):
    """A stochastic layer whose per-row randomness comes from a :class:`RowNoise` (``noise``)."""

    def __init__(self) -> None:
        super().__init__()
        self.noise = RowNoise()

    def begin_sampling(self, samples: int, generator: torch.Generator | None) -> None:
        super().begin_sampling(samples, generator)
        self.noise.begin(samples, generator)

    def end_sampling(self) -> None:
        super().end_sampling()
        self.noise.end()

    def select_group(self, t: int) -> None:
        """Reference loop: behave as group ``t`` of the current sampling block, alone."""
        self.noise.select_group(t)
        self.groups = 1


class MCDropout(RowNoiseModule):
    """Dropout with probability ``p``, active per row inside sampling whatever the train mode.

    ``channelwise=True`` drops whole channels of ``[N, C, ...]`` (``Dropout1d/2d/3d``); otherwise
    every element is dropped independently. Kept values are scaled by ``1 / (1 - p)``.
    """

    def __init__(self, p: float = 0.5, channelwise: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = float(p)
        self.channelwise = channelwise

    @classmethod
    def from_dropout(cls, layer: nn.Module, p: float | None = None) -> MCDropout:
        """An MCDropout with the rate (or ``p``) and the element/channel mode of ``layer``."""
        channelwise = isinstance(layer, nn.Dropout1d | nn.Dropout2d | nn.Dropout3d)
        new = cls(layer.p if p is None else p, channelwise)
        new.train(layer.training)
        return new

    def extra_repr(self) -> str:
        return f"p={self.p}, channelwise={self.channelwise}"

    def forward(self, x: Tensor) -> Tensor:
        if not (self.stochastic and self.noise.keys is not None):
            if self.channelwise and x.dim() > 2:
                return F.dropout1d(x.flatten(2), self.p, self.training).view_as(x)
            return F.dropout(x, self.p, self.training)
        if self.p == 0.0:
            self.noise.advance(x.shape[0])
            return x
        rows = x.shape[0]
        if self.channelwise and x.dim() > 2:
            u = self.noise.uniform(rows, x.shape[1], x.device)  # [T*n, C]
            keep = (u >= self.p).view(rows, x.shape[1], *([1] * (x.dim() - 2)))
        else:
            feats = x[0].numel()
            keep = (self.noise.uniform(rows, feats, x.device) >= self.p).view_as(x)  # [T*n, ...]
        self.noise.advance(rows)
        return x * keep.to(x.dtype) / (1.0 - self.p)


def convert_dropout(model: nn.Module, p: float | None = None) -> list[MCDropout]:
    """Replace every ``nn.Dropout``/``Dropout1d/2d/3d`` in ``model`` (in place) by MCDropout.

    ``p`` overrides every layer's rate. Returns all MCDropout layers in order; raises
    ``ValueError`` when the network has none (build our factories with ``dropout=p``).
    """
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, _DROPOUTS):
                setattr(parent, name, MCDropout.from_dropout(child, p))
            elif isinstance(child, MCDropout) and p is not None:
                child.p = float(p)
    layers = [m for m in stochastic_modules(model) if isinstance(m, MCDropout)]
    if not layers:
        raise ValueError(
            f"MC dropout needs a network with dropout layers; {type(model).__name__} has none "
            "(build bayesify's models with dropout=p, or add nn.Dropout layers)"
        )
    return layers


def select_group(model: nn.Module, t: int) -> None:
    """Put every noise layer with a ``select_group`` into group-``t``-alone mode."""
    for m in stochastic_modules(model):
        if hasattr(m, "select_group"):
            m.select_group(t)


def reference_loop(
    model: nn.Module, x: Tensor, samples: int, generator: torch.Generator | None
) -> Tensor:
    """The plain loop of T passes over ``x [N, ...]`` with the draws a one-pass
    ``sampling(model, T, generator)`` would make: group t alone in pass t. ``[T, N, ...]``."""
    outs = []
    with sampling(model, samples, generator):
        for t in range(samples):
            select_group(model, t)
            outs.append(model(x))
    return torch.stack(outs)
