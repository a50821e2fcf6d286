"""Toy 1-D regression sets and data_root resolution."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bayesify.data import (
    DataError,
    data_root,
    toy_cubic,
    toy_grid,
    toy_teye,
    toy_teye_function,
)


def test_toy_cubic_shapes_determinism_and_noise() -> None:
    x, y = toy_cubic()
    assert x.shape == (30, 1) and y.shape == (30,) and x.dtype == y.dtype == torch.float32
    assert x.min() >= -4 and x.max() <= 4
    x2, y2 = toy_cubic(seed=0)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    x3, _ = toy_cubic(seed=1)
    assert not torch.equal(x, x3)
    resid = y - x[:, 0] ** 3
    assert resid.abs().max() < 4 * 3.0  # within 4 noise std
    xb, yb = toy_cubic(20000, seed=2)
    resid = (yb - xb[:, 0] ** 3).double()
    assert float(resid.std()) == pytest.approx(3.0, rel=0.03)
    assert abs(float(resid.mean())) < 0.1
    _, y0 = toy_cubic(50, noise_std=0.0)
    assert y0.shape == (50,)


def test_toy_teye_gap_and_function() -> None:
    x, y = toy_teye(seed=5)
    assert x.shape == (100, 1) and y.shape == (100,)
    assert not ((x > -1) & (x < 1)).any()  # the gap holds no inputs
    assert ((x >= -5) & (x <= 5)).all()
    assert (x[:50] <= -1).all() and (x[50:] >= 1).all()
    assert (y - toy_teye_function(x[:, 0])).abs().max() < 5 * 0.3
    x2, y2 = toy_teye(seed=5)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    with pytest.raises(ValueError, match="gap"):
        toy_teye(gap=(2.0, 1.0))


def test_toy_grid_and_validation() -> None:
    g = toy_grid(-6, 6, 13)
    assert g.shape == (13, 1) and g.dtype == torch.float32
    assert g[0, 0] == -6 and g[-1, 0] == 6 and g[6, 0] == 0
    with pytest.raises(ValueError, match="n must be"):
        toy_cubic(0)
    with pytest.raises(ValueError, match="noise_std"):
        toy_cubic(noise_std=-1.0)
    with pytest.raises(ValueError, match="lo < hi"):
        toy_grid(1.0, 1.0)


def test_data_root_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAYESIFY_DATA", str(tmp_path))
    assert data_root() == tmp_path.resolve()
    monkeypatch.setenv("BAYESIFY_DATA", str(tmp_path / "missing"))
    with pytest.raises(DataError, match="BAYESIFY_DATA"):
        data_root()


def test_data_root_cwd_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared" / "data"
    shared.mkdir(parents=True)
    (tmp_path / "proj").mkdir()
    monkeypatch.delenv("BAYESIFY_DATA", raising=False)
    monkeypatch.chdir(tmp_path / "proj")
    assert data_root() == shared.resolve()
