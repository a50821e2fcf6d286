"""Test-time augmentation as a stochastic layer: each sample group sees its own augmented copy.

:class:`Augment` sits in front of a network. Inside :func:`bayesify.nn.sampling` it transforms
each of the ``T*N`` rows with its own draw (a flip, a shift, a crop offset, Gaussian noise; the
transforms of :class:`~bayesify.options.Augmentation` in the order given), so sample group t
holds an augmented copy of the N inputs and the one pass predicts all T copies at once. Outside
sampling it is the identity.

The draws come from :class:`~bayesify.nn.row_noise.RowNoise` (a hash of the group's key, the
data row and the transform's streams): the same generator gives the same augmentations,
chunking over N or T does not change them, and ``select_groups(t, t + 1)`` replays group t
alone (the reference loop of T passes).
"""

from __future__ import annotations

import torch
from torch import Tensor

from bayesify.nn.row_noise import RowNoiseModule
from bayesify.options import Augmentation, format_transforms

Transforms = tuple[tuple[Augmentation, float | int | None], ...]

#: transform kinds that move pixels: they need image rows ``[..., H, W]``
IMAGE_ONLY = frozenset({Augmentation.FLIP, Augmentation.SHIFT, Augmentation.CROP})


def check_augmentable(transforms: Transforms, row_shape: tuple[int, ...]) -> None:
    """Refuse inputs whose rows ``row_shape`` the transforms cannot apply to (one line)."""
    image_kinds = sorted({k.value for k, _ in transforms if k in IMAGE_ONLY})
    if image_kinds and len(row_shape) < 2:
        raise ValueError(
            f"TTA transform(s) {', '.join(image_kinds)} need image inputs [N, C, H, W] or "
            f"[N, H, W], got rows of shape {list(row_shape)}; for tables use noise:σ"
        )
    for kind, value in transforms:
        if kind is Augmentation.CROP and value >= min(row_shape[-2:]):
            raise ValueError(
                f"TTA transform crop:{value} pads by reflection, so it must be below the image's "
                f"height and width {list(row_shape[-2:])}"
            )


def _offsets(u: Tensor, k: int) -> Tensor:
    """Uniforms in (0, 1) -> whole offsets uniform in ``-k .. k`` (int64)."""
    return (u * (2 * k + 1)).floor().long().clamp_(0, 2 * k) - k


def _moved(x: Tensor, dy: Tensor, dx: Tensor, reflect: bool) -> Tensor:
    """Rows of ``x [R, ..., H, W]`` translated by ``(dy, dx) [R]``: output pixel (i, j) reads
    input pixel (i + dy, j + dx), outside the image the nearest edge pixel or (``reflect``) the
    mirror image without repeating the edge (a pad-by-reflection-and-crop)."""
    rows, h, w = x.shape[0], x.shape[-2], x.shape[-1]
    i = torch.arange(h, device=x.device) + dy.to(x.device).view(-1, 1)  # [R, H]
    j = torch.arange(w, device=x.device) + dx.to(x.device).view(-1, 1)  # [R, W]
    if reflect:
        i, j = i.abs(), j.abs()
        i = torch.where(i > h - 1, 2 * (h - 1) - i, i)
        j = torch.where(j > w - 1, 2 * (w - 1) - j, j)
    else:
        i, j = i.clamp(0, h - 1), j.clamp(0, w - 1)
    index = (i.unsqueeze(2) * w + j.unsqueeze(1)).view(rows, 1, h * w)  # [R, 1, H*W]
    flat = x.reshape(rows, -1, h * w)
    return flat.gather(2, index.expand(-1, flat.shape[1], -1)).view_as(x)


class Augment(RowNoiseModule):
    """Per-row test-time augmentation while sampling (identity otherwise); ``transforms`` as
    :func:`bayesify.options.parse_transforms` gives them, applied in order."""

    def __init__(self, transforms: Transforms) -> None:
        super().__init__()
        self.transforms = tuple(transforms)

    def extra_repr(self) -> str:
        return format_transforms(self.transforms)

    def forward(self, x: Tensor) -> Tensor:
        if not self.sampling_active:
            return x
        check_augmentable(self.transforms, tuple(x.shape[1:]))
        rows, dev = x.shape[0], x.device
        for i, (kind, value) in enumerate(self.transforms):
            stream = 2 * i + 1  # transform i owns streams 2i+1 and 2i+2 (normal(i) uses both)
            if kind is Augmentation.FLIP:
                flip = self.noise.uniform(rows, 1, dev, stream) < 0.5  # [R, 1]
                shape = (rows,) + (1,) * (x.dim() - 1)
                x = torch.where(flip.view(shape), x.flip(-1), x)
            elif kind is Augmentation.NOISE:
                eps = self.noise.normal(rows, x[0].numel(), dev, i)  # [R, D] float64
                x = x + float(value) * eps.to(x.dtype).view_as(x)
            else:  # shift or crop: a whole-pixel offset per row
                u = self.noise.uniform(rows, 2, dev, stream)  # [R, 2]
                k = int(value)
                reflect = kind is Augmentation.CROP
                x = _moved(x, _offsets(u[:, 0], k), _offsets(u[:, 1], k), reflect)
        self.noise.advance(rows)
        return x
