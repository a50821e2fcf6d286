"""The transfer set a distilled student learns from: the training inputs and copies of them.

A student can only reproduce the uncertainty its transfer set shows it (Malinin et al. 2020
needed auxiliary out-of-distribution data for the Dirichlet student to keep its teacher's
out-of-distribution signal). Without outside data, :data:`~bayesify.options.Augment.OUTLIERS`
builds such rows from the training inputs themselves, by transforms that destroy the class
semantics but keep the image statistics (pixel values, strokes, textures), so the teacher's
samples disagree on them as they do on unfamiliar inputs:

- ``jigsaw``: the image cut into a 4 x 4 grid of patches, the patches shuffled;
- ``pixels``: the pixels permuted within each patch of the grid;
- ``rotate``: a rotation by 90, 180 or 270 degrees;
- ``invert``: each image mirrored in its own value range (``max + min - x``);
- ``zoom``: a random crop of a third to a half of the side, scaled back up;
- ``noise``: Gaussian noise of standard deviation ``noise`` (network input units).

Each outlier copy draws one transform per row, uniformly; the first copy of ``outliers`` is
always the noise copy. Inputs that are not images (``[N, C, H, W]`` with H, W >= 8) get the
noise copy alone: tabular rows have no class semantics a shuffle could destroy while keeping
their statistics, so a table's transfer set is the one of ``noise`` with one copy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from bayesify.options import Augment

#: the transforms of an outlier copy, in the order a row's draw indexes them
OUTLIER_KINDS = ("jigsaw", "pixels", "rotate", "invert", "zoom", "noise")
#: patches per side of the jigsaw and pixel-permutation grid
GRID = 4


def is_image_batch(x: Tensor) -> bool:
    """Whether ``x`` is a batch of images ``[N, C, H, W]`` with H, W >= 8."""
    return x.dim() == 4 and min(x.shape[-2:]) >= 2 * GRID


def transfer_inputs(
    x: Tensor, augment: Augment, copies: int, noise: float, generator: torch.Generator
) -> Tensor:
    """``x [N, ...]`` followed by ``copies`` augmented copies: ``[(1 + copies) N, ...]``.
    ``outliers``: the first copy is the noise copy, the others outlier copies on images (on
    other inputs there are none: ``[2 N, ...]``)."""
    parts = [x]
    for i in range(copies if augment is not Augment.NONE else 0):
        if augment is Augment.MIXUP:
            j = torch.randperm(len(x), generator=generator).to(x.device)
            lam = torch.rand(len(x), generator=generator).to(x)
            lam = lam.reshape(-1, *([1] * (x.dim() - 1)))
            parts.append(lam * x + (1 - lam) * x[j])
        elif augment is Augment.OUTLIERS and i > 0:
            if is_image_batch(x):
                parts.append(outlier_copy(x, noise, generator))
        else:
            parts.append(x + noise * torch.randn(x.shape, generator=generator).to(x))
    return torch.cat(parts)


def outlier_copy(
    x: Tensor, noise: float, generator: torch.Generator, kinds: tuple[str, ...] = OUTLIER_KINDS
) -> Tensor:
    """One copy of the images ``x [N, C, H, W]``, each row under one of ``kinds`` drawn
    uniformly (the module's docstring lists them)."""
    pick = torch.randint(len(kinds), (len(x),), generator=generator)
    out = x.clone()
    for k, name in enumerate(kinds):
        rows = (pick == k).nonzero().squeeze(1).to(x.device)
        if len(rows):
            out[rows] = TRANSFORMS[name](x[rows], noise, generator)
    return out


def _grid(x: Tensor) -> tuple[int, int, int, int]:
    """Patch height and width of the grid and the covered height and width."""
    ph, pw = x.shape[-2] // GRID, x.shape[-1] // GRID
    return ph, pw, ph * GRID, pw * GRID


def _patches(x: Tensor) -> Tensor:
    """``[N, C, H, W]`` -> ``[N, C, GRID², ph, pw]`` (the covered part of each image)."""
    ph, pw, h, w = _grid(x)
    n, c = x.shape[:2]
    p = x[..., :h, :w].reshape(n, c, GRID, ph, GRID, pw).permute(0, 1, 2, 4, 3, 5)
    return p.reshape(n, c, GRID * GRID, ph, pw)


def _unpatch(p: Tensor, x: Tensor) -> Tensor:
    ph, pw, h, w = _grid(x)
    n, c = x.shape[:2]
    p = p.reshape(n, c, GRID, GRID, ph, pw).permute(0, 1, 2, 4, 3, 5).reshape(n, c, h, w)
    out = x.clone()
    out[..., :h, :w] = p
    return out


def jigsaw(x: Tensor, noise: float, generator: torch.Generator) -> Tensor:
    """The grid's patches shuffled, one permutation per image."""
    p = _patches(x)
    order = torch.argsort(torch.rand(len(x), GRID * GRID, generator=generator), -1).to(x.device)
    idx = order[:, None, :, None, None].expand_as(p)
    return _unpatch(p.gather(2, idx), x)


def pixels(x: Tensor, noise: float, generator: torch.Generator) -> Tensor:
    """The pixels permuted within every patch of the grid, one permutation per image."""
    p = _patches(x)
    n, c, k, ph, pw = p.shape
    flat = p.reshape(n, c, k, ph * pw)
    order = torch.argsort(torch.rand(n, ph * pw, generator=generator), -1).to(x.device)
    flat = flat.gather(3, order[:, None, None, :].expand_as(flat))
    return _unpatch(flat.reshape(n, c, k, ph, pw), x)


def rotate(x: Tensor, noise: float, generator: torch.Generator) -> Tensor:
    """A rotation by 90, 180 or 270 degrees per image (square images; else 180)."""
    turns = torch.randint(1, 4, (len(x),), generator=generator)
    if x.shape[-1] != x.shape[-2]:
        turns.fill_(2)
    out = x.clone()
    for k in (1, 2, 3):
        rows = (turns == k).nonzero().squeeze(1).to(x.device)
        if len(rows):
            out[rows] = torch.rot90(x[rows], k, dims=(-2, -1))
    return out


def invert(x: Tensor, noise: float, generator: torch.Generator) -> Tensor:
    """Each image mirrored in its own value range: ``max + min - x``."""
    flat = x.flatten(1)
    lo = flat.min(1).values.reshape(-1, 1, 1, 1)
    hi = flat.max(1).values.reshape(-1, 1, 1, 1)
    return hi + lo - x


def zoom(x: Tensor, noise: float, generator: torch.Generator) -> Tensor:
    """A random square crop of a third to a half of the shorter side, scaled back up."""
    n, _, h, w = x.shape
    side = min(h, w)
    out = torch.empty_like(x)
    sizes = torch.randint(side // 3, side // 2 + 1, (n,), generator=generator).tolist()
    tops = torch.rand(n, generator=generator).tolist()
    lefts = torch.rand(n, generator=generator).tolist()
    for i, (s, t, l) in enumerate(zip(sizes, tops, lefts, strict=True)):
        a, b = int(t * (h - s + 1)), int(l * (w - s + 1))
        crop = x[i : i + 1, :, a : a + s, b : b + s]
        out[i] = F.interpolate(crop, size=(h, w), mode="bilinear", align_corners=False)[0]
    return out


def gaussian(x: Tensor, noise: float, generator: torch.Generator) -> Tensor:
    """Gaussian noise of standard deviation ``noise``."""
    return x + noise * torch.randn(x.shape, generator=generator).to(x)


TRANSFORMS = {"jigsaw": jigsaw, "pixels": pixels, "rotate": rotate, "invert": invert,
              "zoom": zoom, "noise": gaussian}  # fmt: skip
