"""MC dropout that knows the sample axis.

Inside :func:`bayesify.nn.sampling` every row of the ``T*N`` batch gets its own dropout mask;
outside it, :class:`MCDropout` is exactly ``nn.Dropout`` (masks in ``.train()``, identity in
``.eval()``). Sampling never touches ``.train()``/``.eval()``, so batch norm stays in inference
mode while the masks are drawn.

The masks come from :class:`~bayesify.nn.row_noise.RowNoise` (the uniform for group t, data
row i, unit j is a hash of (key_t, i, j)): the same generator gives the same masks, chunking
over N or over T does not change them, and :func:`bayesify.nn.stochastic.reference_loop`
replays group t alone in pass t.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.nn.row_noise import RowNoiseModule
from bayesify.nn.stochastic import stochastic_modules

__all__ = ["MCDropout", "convert_dropout"]

_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)


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
        if not self.sampling_active:
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
