"""The distillation transfer set: the default outlier copies are built from the caller's images
alone (no other data set, digits least of all), each transform does what it says, tables keep
the noise copy of before, and the student's epoch is the one its held-out rows choose."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import scipy.stats
import torch

import bayesify
from bayesify.methods.distillation import transfer
from bayesify.methods.distillation.transfer import (
    OUTLIER_KINDS,
    TRANSFORMS,
    outlier_copy,
    transfer_inputs,
)
from bayesify.metrics import rank_correlation
from bayesify.models import lenet, mlp
from bayesify.options import Augment


def images(n: int = 12, side: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 1, side, side, generator=torch.Generator().manual_seed(seed))


def _patches(x: torch.Tensor) -> torch.Tensor:
    """``[N, 1, 16, 16]`` -> ``[N, 16 patches, 16 pixels]`` of the 4 x 4 grid."""
    return x.reshape(len(x), 4, 4, 4, 4).permute(0, 1, 3, 2, 4).reshape(len(x), 16, 16)


def test_each_transform_keeps_the_image_statistics_it_should():
    x, g = images(), torch.Generator().manual_seed(1)
    sort = lambda t: t.flatten(1).sort(-1).values  # noqa: E731
    jig = TRANSFORMS["jigsaw"](x, 1.0, g)  # the same patches, in other places
    assert not torch.equal(jig, x)
    torch.testing.assert_close(_patches(jig).sort(1).values, _patches(x).sort(1).values)
    pix = TRANSFORMS["pixels"](x, 1.0, g)  # each patch keeps its own pixel values
    assert not torch.equal(pix, x)
    torch.testing.assert_close(_patches(pix).sort(-1).values, _patches(x).sort(-1).values)
    rot = TRANSFORMS["rotate"](x, 1.0, g)
    for r, row in zip(rot, x, strict=True):
        assert any(torch.equal(r, torch.rot90(row, k, (-2, -1))) for k in (1, 2, 3))
    inv = TRANSFORMS["invert"](x, 1.0, g)  # mirrored in the row's own range: an involution
    torch.testing.assert_close(sort(inv), sort(x.amax((1, 2, 3), keepdim=True)
                                               + x.amin((1, 2, 3), keepdim=True) - x))  # fmt: skip
    torch.testing.assert_close(TRANSFORMS["invert"](inv, 1.0, g), x)
    zoom = TRANSFORMS["zoom"](x, 1.0, g)  # bilinear blends of the row's own pixels
    assert (zoom.flatten(1).amin(1) >= x.flatten(1).amin(1) - 1e-5).all()
    assert (zoom.flatten(1).amax(1) <= x.flatten(1).amax(1) + 1e-5).all()
    noisy = TRANSFORMS["noise"](x, 0.5, g)
    assert 0.4 < float((noisy - x).std()) < 0.6


def test_outlier_copy_uses_every_kind_row_by_row():
    x = images(60)
    out = outlier_copy(x, 1.0, torch.Generator().manual_seed(2))
    assert out.shape == x.shape and not torch.equal(out, x)
    rotated = sum(any(torch.equal(o, torch.rot90(r, k, (-2, -1))) for k in (1, 2, 3))
                  for o, r in zip(out, x, strict=True))  # fmt: skip
    assert 0 < rotated < len(x)  # about a sixth of the rows
    assert len(OUTLIER_KINDS) == len(TRANSFORMS)


def test_outliers_on_images_and_on_tables():
    x, g = images(10), torch.Generator().manual_seed(3)
    xt = transfer_inputs(x, Augment.OUTLIERS, 2, 1.0, g)
    assert xt.shape == (30, 1, 16, 16) and torch.equal(xt[:10], x)
    noisy = transfer_inputs(x, Augment.NOISE, 1, 1.0, torch.Generator().manual_seed(3))
    torch.testing.assert_close(xt[10:20], noisy[10:])  # the first copy is the noise copy
    assert not torch.allclose(xt[20:], xt[10:20])
    # a table: the noise copy alone, draw for draw the transfer set of ``noise``
    rows = torch.randn(10, 4)
    got = transfer_inputs(rows, Augment.OUTLIERS, 2, 1.0, torch.Generator().manual_seed(4))
    want = transfer_inputs(rows, Augment.NOISE, 1, 1.0, torch.Generator().manual_seed(4))
    torch.testing.assert_close(got, want)


def test_default_transfer_set_is_the_callers_images_and_their_outliers(monkeypatch):
    """``distill`` at its defaults: training images, a noise copy and an outlier copy, built
    without reading any data set (MNIST and sklearn's digits are out-of-distribution test
    sets and must never enter it)."""
    import sklearn.datasets

    import bayesify.data
    import bayesify.data.idx

    def refuse(*args, **kwargs):
        raise AssertionError("the transfer set read a data set")

    for module in (bayesify.data, bayesify.data.idx):
        for name in ("load_mnist", "load_fashion_mnist"):
            monkeypatch.setattr(module, name, refuse)
    monkeypatch.setattr(sklearn.datasets, "load_digits", refuse)
    calls: list[torch.Tensor] = []
    real = transfer.transfer_inputs

    def spy(x, *args):
        calls.append(real(x, *args))
        return calls[-1]

    monkeypatch.setattr(
        importlib.import_module("bayesify.methods.distillation.distill"), "transfer_inputs", spy
    )
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 1, 28, 28, generator=g), torch.randint(0, 10, (40,), generator=g)
    teacher = bayesify.MCDropout(lenet(norm="batch"), task="classification", dropout=0.5,
                                 where="before-last-linear")  # fmt: skip
    teacher.fit((x, y), epochs=1, batch_size=16, progress=False)
    student = bayesify.distill(teacher, x, epochs=2, samples=4, progress=False)
    record = student.distillation
    assert record["transfer"] == {"inputs": 40, "augment": "outliers", "copies": 2,
                                  "noise": 1.0, "rows": 120}  # fmt: skip
    (xt,) = calls
    assert torch.equal(xt[:40], x) and xt.shape == (120, 1, 28, 28)
    # every outlier row is a transform of its own training image: its values lie in that
    # image's range widened by the noise kind's draws, never another picture's pixels
    src, out = x.flatten(1), xt[80:].flatten(1)
    same_values = [torch.equal(o.sort().values, s.sort().values) for o, s in zip(out, src)]  # noqa: B905
    assert sum(same_values) >= 10  # jigsaw, pixels and rotations: a permutation of the row


def test_student_keeps_the_epoch_its_held_out_rows_choose():
    """Classification: a tenth of the transfer rows is held out; the validation score of each
    epoch is minus the rank correlation of the student's and the teacher's mutual information
    there, and the student ends with the best epoch's weights."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 4, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    teacher = bayesify.MCDropout(mlp(4, 3, (16,), norm=None, dropout=0.3),
                                 task="classification")  # fmt: skip
    teacher.fit((x, y), epochs=5, batch_size=32, lr=1e-2, progress=False)
    student = bayesify.distill(teacher, x, epochs=4, samples=8, progress=False)
    h, record = student.history, student.distillation
    assert record["held_out_rows"] == 40 and len(h.val_loss) == 4  # 10 % of 400 rows
    assert all(-1 <= v <= 1 for v in h.val_loss)
    assert record["chosen_epoch"] == int(np.argmin(h.val_loss)) + 1
    assert h.train_loss and len(h.train_loss) == 4


def test_regression_trains_on_every_transfer_row():
    x = torch.randn(60, 3)
    teacher = bayesify.MCDropout(mlp(3, 1, (8,), norm=None, dropout=0.2))
    teacher.fit((x, x[:, 0]), val=(x, x[:, 0]), epochs=2, progress=False)
    student = bayesify.distill(teacher, x, epochs=2, samples=4, progress=False)
    assert student.distillation["held_out_rows"] == 0
    assert student.distillation["transfer"]["rows"] == 120 and not student.history.val_loss


@pytest.mark.parametrize("ties", [False, True])
def test_rank_correlation_is_scipys_spearman(ties):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=50), rng.normal(size=50)
    b = b + a
    if ties:
        a, b = a.round(), b.round()
    want = scipy.stats.spearmanr(a, b).statistic
    assert rank_correlation(torch.as_tensor(a), torch.as_tensor(b)) == pytest.approx(want)
    assert rank_correlation(torch.ones(5), torch.arange(5.0)) == 0.0
