"""scikit-learn's handwritten digits as an out-of-distribution image set
(``sklearn.datasets.load_digits``: 1,797 8×8 images with values 0–16, shipped with
scikit-learn, so available offline): the second OOD set of ``bayesify bench images`` and the
OOD set of ``bayesify bench distill`` that was not used in designing the transfer set.
scikit-learn is imported only when the digits are loaded.

They are brought to the MNIST OOD images' format: values / 16 to [0, 1]; bilinear upsampling
(``align_corners=False``) of the 8×8 image to a 20×20 box, padded with 4 black pixels on each
side to 28×28 (MNIST's digits fill a 20×20 box centred in 28×28); then normalised as every
image of the benchmark, ``(x - FASHION_MNIST_MEAN) / FASHION_MNIST_STD``.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F

from .idx import FASHION_MNIST_MEAN, FASHION_MNIST_STD

NAME = "digits"
#: the side of the box the 8×8 digit is upsampled to, and the black border around it (28×28)
BOX, PAD = 20, 4


def to_mnist_format(images: torch.Tensor) -> torch.Tensor:
    """8×8 digit images ``[N, 8, 8]`` with values 0–16 -> normalised ``[N, 1, 28, 28]`` float32
    images as the benchmark feeds its networks."""
    x = images.to(torch.float32).div(16.0).unsqueeze(1)
    x = F.interpolate(x, size=(BOX, BOX), mode="bilinear", align_corners=False)
    x = F.pad(x, (PAD, PAD, PAD, PAD))
    return (x - FASHION_MNIST_MEAN) / FASHION_MNIST_STD


@functools.lru_cache(maxsize=2)
def load_digits_ood(n: int = 0, seed: int = 0) -> torch.Tensor:
    """scikit-learn's digits as OOD images ``[N, 1, 28, 28]``: all 1,797 (``n`` 0 or more than
    that) or ``n`` of them drawn without replacement with ``seed``, in their original order."""
    from sklearn.datasets import load_digits

    images = torch.from_numpy(load_digits().images)  # [1797, 8, 8] float64, 0..16
    if 0 < n < len(images):
        keep = np.sort(np.random.default_rng(seed).permutation(len(images))[:n])
        images = images[torch.from_numpy(keep)]
    return to_mnist_format(images)
