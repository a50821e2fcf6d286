"""IDX decoding against hand-built files, and the Fashion-MNIST / MNIST loaders."""

from __future__ import annotations

import gzip
import hashlib
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from bayesify.data import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    DataError,
    ImageData,
    data_root,
    load_fashion_mnist,
    load_mnist,
    read_idx,
)


def _idx_bytes(type_code: int, fmt: str, shape: tuple[int, ...], values: list) -> bytes:
    header = struct.pack(">BBBB", 0, 0, type_code, len(shape))
    header += struct.pack(f">{len(shape)}I", *shape)
    return header + struct.pack(f">{len(values)}{fmt}", *values)


@pytest.mark.parametrize(
    ("code", "fmt", "values"),
    [
        (0x08, "B", [0, 1, 2, 253, 254, 255]),
        (0x09, "b", [-128, -1, 0, 1, 2, 127]),
        (0x0B, "h", [-32768, -300, 0, 1, 300, 32767]),
        (0x0C, "i", [-(2**31), -70000, 0, 1, 70000, 2**31 - 1]),
        (0x0D, "f", [-1.5, 0.0, 0.25, 3.0, 1e10, -2.0]),
        (0x0E, "d", [-1.5, 0.0, 0.1, 3.0, 1e300, -2.0]),
    ],
)
@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_matches_hand_built_file(
    tmp_path: Path, code: int, fmt: str, values: list, gz: bool
) -> None:
    raw = _idx_bytes(code, fmt, (2, 3), values)
    path = tmp_path / f"x-{code}.idx"
    path.write_bytes(gzip.compress(raw) if gz else raw)
    arr = read_idx(path)
    assert arr.shape == (2, 3)
    expected = np.array(values, dtype=np.dtype(fmt).newbyteorder("=")).reshape(2, 3)
    assert arr.dtype == expected.dtype
    np.testing.assert_array_equal(arr, expected)


def test_read_idx_truncated_and_trailing(tmp_path: Path) -> None:
    raw = _idx_bytes(0x08, "B", (2, 3), [1, 2, 3, 4, 5, 6])
    (tmp_path / "short.idx").write_bytes(raw[:-1])
    with pytest.raises(DataError, match=r"short\.idx.*truncated"):
        read_idx(tmp_path / "short.idx")
    (tmp_path / "long.idx").write_bytes(raw + b"\x00")
    with pytest.raises(DataError, match="trailing"):
        read_idx(tmp_path / "long.idx")
    (tmp_path / "cut.gz").write_bytes(gzip.compress(raw)[:-6])
    with pytest.raises(DataError, match=r"cut\.gz"):
        read_idx(tmp_path / "cut.gz")
    (tmp_path / "head.idx").write_bytes(raw[:6])
    with pytest.raises(DataError, match="header"):
        read_idx(tmp_path / "head.idx")


def test_read_idx_bad_magic_and_missing(tmp_path: Path) -> None:
    (tmp_path / "bad.idx").write_bytes(b"\x00\x01\x08\x01" + struct.pack(">I", 0))
    with pytest.raises(DataError, match=r"bad\.idx: bad IDX magic 0x00010801"):
        read_idx(tmp_path / "bad.idx")
    (tmp_path / "type.idx").write_bytes(b"\x00\x00\x07\x01" + struct.pack(">I", 0))
    with pytest.raises(DataError, match="magic"):
        read_idx(tmp_path / "type.idx")
    with pytest.raises(DataError, match="missing"):
        read_idx(tmp_path / "nope.idx")


def test_image_data_subset_stratified() -> None:
    y = torch.arange(10).repeat_interleave(torch.arange(1, 11) * 10)  # class c has 10(c+1) rows
    x = torch.arange(len(y), dtype=torch.float32).view(-1, 1, 1, 1)
    data = ImageData(x=x, y=y, classes=tuple("abcdefghij"))
    sub = data.subset(55, seed=3)
    counts = torch.bincount(sub.y, minlength=10)
    expected = np.arange(1, 11) * 10 * 55 / len(y)
    assert np.all(np.abs(counts.numpy() - expected) <= 1) and counts.sum() == 55
    assert torch.equal(sub.y, y[sub.x.view(-1).long()])  # rows kept together, sorted order
    assert torch.all(sub.x.view(-1).diff() > 0)
    assert torch.equal(data.subset(55, seed=3).x, sub.x)
    assert not torch.equal(data.subset(55, seed=4).x, sub.x)
    assert len(data.subset(20, seed=0, stratified=False)) == 20
    with pytest.raises(ValueError, match="0..550"):
        data.subset(551)


def _folder(name: str) -> Path:
    try:
        path = data_root() / name
    except DataError as e:
        pytest.skip(f"shared data folder absent ({e})")
    if not path.is_dir():
        pytest.skip(f"{name} data absent: {path} does not exist")
    return path


def test_fashion_mnist_shapes_counts_and_constants() -> None:
    folder = _folder("fashion-mnist")
    train = load_fashion_mnist("train")
    test = load_fashion_mnist("test")
    assert train.x.shape == (60000, 1, 28, 28) and test.x.shape == (10000, 1, 28, 28)
    assert train.x.dtype == torch.float32 and train.y.dtype == torch.int64
    assert torch.bincount(train.y).tolist() == [6000] * 10
    assert torch.bincount(test.y).tolist() == [1000] * 10
    assert train.classes == FASHION_MNIST_CLASSES and train.classes[9] == "Ankle boot"
    # md5 of the decompressed IDX bytes from fashion-mnist/README.md (test images: small)
    raw = gzip.decompress((folder / "t10k-images-idx3-ubyte.gz").read_bytes())
    assert hashlib.md5(raw).hexdigest() == "8181f5470baa50b63fa0f6fddb340f0a"
    test_pixels = torch.frombuffer(bytearray(raw), dtype=torch.uint8, offset=16)
    first = test_pixels[:784].reshape(28, 28).float() / 255.0
    torch.testing.assert_close(test.x[0, 0], (first - FASHION_MNIST_MEAN) / FASHION_MNIST_STD)
    # constants: exact pixel histogram of the training images (read_idx is checked above)
    pixels = torch.from_numpy(read_idx(folder / "train-images-idx3-ubyte.gz").copy())
    p = torch.bincount(pixels.view(-1), minlength=256).double().numpy() / pixels.numel()
    v = np.arange(256) / 255.0
    mean = float((p * v).sum())
    assert abs(FASHION_MNIST_MEAN - mean) < 1e-12
    assert abs(FASHION_MNIST_STD - np.sqrt((p * (v - mean) ** 2).sum())) < 1e-12
    var, mu = torch.var_mean(train.x, correction=0)
    assert float(mu) == pytest.approx(0.0, abs=1e-4) and float(var) == pytest.approx(1.0, abs=1e-4)


def test_fashion_mnist_limit_and_raw_pixels() -> None:
    _folder("fashion-mnist")
    raw = load_fashion_mnist("test", limit=100, normalize=False)
    assert raw.x.shape == (100, 1, 28, 28) and raw.x.min() >= 0.0 and raw.x.max() <= 1.0
    full = load_fashion_mnist("test", normalize=False)
    assert torch.equal(full.x[:100], raw.x) and torch.equal(full.y[:100], raw.y)
    assert len(load_fashion_mnist("test", limit=10**6)) == 10000
    with pytest.raises(DataError, match="limit"):
        load_fashion_mnist("test", limit=-1)
    with pytest.raises(DataError, match="valid: 'train', 'test'"):
        load_fashion_mnist("val")


def test_mnist_test_split_and_shared_preprocessing() -> None:
    folder = _folder("mnist")
    data = load_mnist("test")
    assert data.x.shape == (10000, 1, 28, 28)
    counts = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]  # from mnist/README.md
    assert torch.bincount(data.y).tolist() == counts
    raw = load_mnist("test", normalize=False, limit=5)
    torch.testing.assert_close(data.x[:5], (raw.x - FASHION_MNIST_MEAN) / FASHION_MNIST_STD)
    labels = gzip.decompress((folder / "t10k-labels-idx1-ubyte.gz").read_bytes())
    assert hashlib.md5((folder / "t10k-labels-idx1-ubyte.gz").read_bytes()).hexdigest() == (
        "ec29112dd5afa0611ce80d1b7f02629c"
    )
    assert data.y.tolist() == list(labels[8:])
    if not (folder / "train-images-idx3-ubyte.gz").exists():
        with pytest.raises(DataError, match="only the test split"):
            load_mnist("train")


def test_image_loaders_missing_root(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        load_fashion_mnist("test", root=tmp_path / "nowhere")
    with pytest.raises(DataError, match="fashion-mnist is missing"):
        load_fashion_mnist("test", root=tmp_path)
