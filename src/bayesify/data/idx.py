"""IDX files (the MNIST format) and the Fashion-MNIST / MNIST image loaders.

IDX layout: 2 zero bytes, a type byte, a dimension-count byte, one big-endian uint32 per
dimension, then the row-major data (big-endian for multi-byte types). Files may be gzipped
(detected from the gzip magic bytes, not the name). Decoded arrays are cached in memory per
process (keyed on path, mtime and size); nothing is written to disk.
"""

from __future__ import annotations

import gzip
import logging
import math
import struct
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from bayesify.options import shown

from .errors import DataError
from .paths import resolve_root

__all__ = [
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_MEAN",
    "FASHION_MNIST_STD",
    "MNIST_CLASSES",
    "ImageData",
    "load_fashion_mnist",
    "load_mnist",
    "read_idx",
]

logger = logging.getLogger(__name__)

# Pixel mean / population std of the Fashion-MNIST TRAINING images scaled to [0, 1]
# (all 60000 x 28 x 28 pixels, float64). MNIST (the OOD set) uses the same constants so that
# in- and out-of-distribution images go through identical preprocessing.
FASHION_MNIST_MEAN = 0.2860405969887955
FASHION_MNIST_STD = 0.35302424451492254

FASHION_MNIST_CLASSES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
MNIST_CLASSES: tuple[str, ...] = tuple(str(d) for d in range(10))

_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_SPLIT_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


def _decode_idx(raw: bytes, name: str) -> np.ndarray:
    """Raw (decompressed) IDX bytes -> read-only native-endian array."""
    if len(raw) < 4:
        raise DataError(f"{name}: {len(raw)} bytes is too short for an IDX header")
    type_code, ndim = raw[2], raw[3]
    if raw[:2] != b"\x00\x00" or type_code not in _IDX_DTYPES or ndim == 0:
        magic = struct.unpack(">I", raw[:4])[0]
        raise DataError(
            f"{name}: bad IDX magic 0x{magic:08x} (expected 0x0000TTDD with type TT in "
            f"{{{', '.join(f'0x{t:02x}' for t in _IDX_DTYPES)}}} and DD >= 1 dimensions)"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{name}: truncated IDX header ({len(raw)} of {header} bytes)")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = _IDX_DTYPES[type_code]
    count = math.prod(shape)
    expected, got = count * dtype.itemsize, len(raw) - header
    if got != expected:
        what = "truncated" if got < expected else "trailing bytes"
        raise DataError(
            f"{name}: header says shape {shape} of {dtype.name} ({expected} data bytes) "
            f"but the file holds {got} ({what})"
        )
    arr = np.frombuffer(raw, dtype=dtype, count=count, offset=header).reshape(shape)
    if not dtype.isnative and dtype.itemsize > 1:
        arr = arr.astype(dtype.newbyteorder("="))
    arr.flags.writeable = False
    return arr


@lru_cache(maxsize=16)
def _read_idx_cached(path: str, mtime_ns: int, size: int) -> np.ndarray:
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{path}: corrupt or truncated gzip data ({e})") from None
    return _decode_idx(raw, path)


def read_idx(path: str | Path) -> np.ndarray:
    """Decode a raw or gzipped IDX file into an array of its header's shape and type.

    Types: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64.
    The result is READ-ONLY (it is shared through the per-process cache); ``.copy()`` it to
    modify. Raises ``DataError`` for a missing file, bad magic, or a byte count that does not
    match the header.
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"missing IDX file {p}")
    st = p.stat()
    return _read_idx_cached(str(p.resolve()), st.st_mtime_ns, st.st_size)


@dataclass(frozen=True, eq=False)
class ImageData:
    """An image classification set: ``x [N, 1, H, W]`` float32, ``y [N]`` int64, class names."""

    x: torch.Tensor  # [N, 1, H, W]
    y: torch.Tensor  # [N]
    classes: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.x.ndim != 4 or self.y.ndim != 1 or self.x.shape[0] != self.y.shape[0]:
            raise ValueError(
                f"ImageData needs x [N, C, H, W] and y [N]; got {tuple(self.x.shape)}, "
                f"{tuple(self.y.shape)}"
            )

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def subset(self, n: int, seed: int = 0, *, stratified: bool = True) -> ImageData:
        """``n`` rows drawn without replacement (``np.random.default_rng(seed)``), kept in
        their original order. ``stratified=True`` keeps class proportions: each class gets
        ``n * count_c / N`` rows up to rounding (within one)."""
        total = len(self)
        if not 0 <= n <= total:
            raise ValueError(f"subset size must be in 0..{total}, got {n}")
        perm = np.random.default_rng(seed).permutation(total)
        if stratified:
            labels = self.y.numpy()[perm]  # [N] labels in permuted order
            counts = np.bincount(labels, minlength=max(self.num_classes, 1))
            order = np.argsort(labels, kind="stable")
            starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
            rank = np.empty(total, dtype=np.float64)  # rank of each row within its class
            rank[order] = np.arange(total) - starts[labels[order]]
            key = (rank + 0.5) / counts[labels]
            chosen = perm[np.argsort(key, kind="stable")[:n]]
        else:
            chosen = perm[:n]
        rows = torch.from_numpy(np.sort(chosen))
        return ImageData(x=self.x[rows], y=self.y[rows], classes=self.classes)


def _load_image_set(
    folder: Path,
    label: str,
    split: str,
    classes: tuple[str, ...],
    limit: int | None,
    normalize: bool,
) -> ImageData:
    if split not in _SPLIT_FILES:
        raise DataError(f"{label}: unknown split {split!r}; valid: 'train', 'test'")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise DataError(f"{label}: limit must be None or an int >= 0, got {shown(limit)}")
    if not folder.is_dir():
        raise DataError(f"{label}: folder {folder} is missing")
    img_file, lab_file = (folder / f for f in _SPLIT_FILES[split])
    images, labels = read_idx(img_file), read_idx(lab_file)  # [N, H, W] uint8, [N] uint8
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise DataError(
            f"{label}: {img_file.name} {images.shape} and {lab_file.name} {labels.shape} "
            "do not form N images [N, H, W] with N labels"
        )
    if labels.size and int(labels.max()) >= len(classes):
        raise DataError(f"{lab_file}: label {int(labels.max())} >= {len(classes)} classes")
    n = images.shape[0] if limit is None else min(limit, images.shape[0])
    x = torch.from_numpy(images[:n].astype(np.float32)).unsqueeze(1)  # [n, 1, H, W] in 0..255
    if normalize:  # (x / 255 - mean) / std as one scale and one shift
        x.mul_(1.0 / (255.0 * FASHION_MNIST_STD)).sub_(FASHION_MNIST_MEAN / FASHION_MNIST_STD)
    else:
        x.div_(255.0)
    y = torch.from_numpy(labels[:n].astype(np.int64))  # [n]
    logger.debug("%s %s: %d images (normalize=%s)", label, split, n, normalize)
    return ImageData(x=x, y=y, classes=classes)


def load_fashion_mnist(
    split: str = "train",
    *,
    root: str | Path | None = None,
    limit: int | None = None,
    normalize: bool = True,
) -> ImageData:
    """Fashion-MNIST ``split`` ("train": 60000, "test": 10000 images).

    ``x [N, 1, 28, 28]`` float32: pixels / 255, then ``(x - FASHION_MNIST_MEAN) /
    FASHION_MNIST_STD`` when ``normalize``. ``limit`` keeps the first ``limit`` rows in file
    order (all rows if ``limit`` exceeds N); use ``ImageData.subset`` for a random subset.
    """
    folder = resolve_root(root) / "fashion-mnist"
    return _load_image_set(folder, "Fashion-MNIST", split, FASHION_MNIST_CLASSES, limit, normalize)


def load_mnist(
    split: str = "test",
    *,
    root: str | Path | None = None,
    limit: int | None = None,
    normalize: bool = True,
) -> ImageData:
    """MNIST ``split`` (the out-of-distribution set for Fashion-MNIST models).

    Preprocessing is identical to ``load_fashion_mnist`` (same Fashion-MNIST mean/std), so
    OOD images are normalised exactly like in-distribution ones. Only the test images are
    shipped in the shared data folder; ``split="train"`` raises ``DataError`` unless
    ``train-images-idx3-ubyte.gz`` has been added.
    """
    folder = resolve_root(root) / "mnist"
    if split == "train" and folder.is_dir() and not (folder / _SPLIT_FILES["train"][0]).is_file():
        raise DataError(
            f"MNIST train images are not shipped in {folder}: only the test split "
            "(images + labels) and the train labels are; use split='test' "
            "(MNIST is the out-of-distribution test set)"
        )
    return _load_image_set(folder, "MNIST", split, MNIST_CLASSES, limit, normalize)
