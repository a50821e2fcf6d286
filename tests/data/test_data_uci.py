"""UCI loader tests against independent references (np.loadtxt, the legacy numpy seed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bayesify.data import (
    UCI_DATASETS,
    DataError,
    Standardizer,
    data_root,
    load_uci,
    uci_n_splits,
)


@pytest.fixture(scope="module")
def uci_dir() -> Path:
    try:
        path = data_root() / "uci"
    except DataError as e:
        pytest.skip(f"shared data folder absent ({e})")
    if not path.is_dir():
        pytest.skip(f"UCI data absent: {path} does not exist")
    return path


def _reference(uci_dir: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    data = np.loadtxt(uci_dir / name / "data.txt")
    feats = np.loadtxt(uci_dir / name / "index_features.txt").astype(int)
    target = int(np.loadtxt(uci_dir / name / "index_target.txt"))
    return data[:, feats], data[:, target]


def test_gal_split0_boston_matches_files(uci_dir: Path) -> None:
    s = load_uci("bostonHousing", 0)
    train = np.loadtxt(uci_dir / "bostonHousing" / "index_train_0.txt").astype(int)
    test = np.loadtxt(uci_dir / "bostonHousing" / "index_test_0.txt").astype(int)
    assert (train.size, test.size) == (455, 51)
    n_fit = int(0.8 * 455)  # Gal 2018: first 80% of the training file order = train
    assert n_fit == 364
    assert s.x_train.shape == (364, 13) and s.y_train.shape == (364,)
    assert s.x_val.shape == (91, 13) and s.x_test.shape == (51, 13)
    assert s.x_train.dtype == torch.float32 and s.y_test.dtype == torch.float32
    np.testing.assert_array_equal(s.train_index.numpy(), train[:n_fit])
    np.testing.assert_array_equal(s.val_index.numpy(), train[n_fit:])
    np.testing.assert_array_equal(s.test_index.numpy(), test)

    x, y = _reference(uci_dir, "bostonHousing")
    mu, sd = x[train[:n_fit]].mean(0), x[train[:n_fit]].std(0)
    np.testing.assert_allclose(s.x_test.numpy(), (x[test] - mu) / sd, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s.x_train.double().mean(0).numpy(), 0.0, atol=1e-5)
    np.testing.assert_allclose(s.x_train.double().std(0, unbiased=False).numpy(), 1.0, atol=1e-5)
    assert abs(float(s.y_train.double().mean())) < 1e-5
    np.testing.assert_allclose(s.y_test_original.numpy(), y[test], atol=1e-5, rtol=0)
    np.testing.assert_allclose(s.original_targets("val").numpy(), y[train[n_fit:]], atol=1e-5)
    assert (s.name, s.split, s.protocol) == ("bostonHousing", 0, "gal")


def test_val_fraction_zero_gives_empty_val_and_full_train(uci_dir: Path) -> None:
    s = load_uci("yacht", 3, val_fraction=0.0)
    train = np.loadtxt(uci_dir / "yacht" / "index_train_3.txt").astype(int)
    assert s.x_val.shape == (0, 6) and s.y_val.shape == (0,)
    np.testing.assert_array_equal(s.train_index.numpy(), train)


@pytest.mark.parametrize("split", [0, 4])
def test_teye_split_matches_legacy_global_seed(uci_dir: Path, split: int) -> None:
    s = load_uci("concrete", split, protocol="teye")
    n = 1030
    state = np.random.get_state()
    try:
        np.random.seed(split + 1)
        idx = np.arange(n)
        np.random.shuffle(idx)
    finally:
        np.random.set_state(state)
    n_test = round(0.2 * n)
    assert n_test == 206
    np.testing.assert_array_equal(s.test_index.numpy(), idx[:n_test])
    n_fit = int(0.8 * (n - n_test))
    np.testing.assert_array_equal(s.train_index.numpy(), idx[n_test:][:n_fit])
    parts = [s.train_index, s.val_index, s.test_index]
    assert sum(p.numel() for p in parts) == n
    assert torch.cat(parts).unique().numel() == n  # disjoint and covering all rows
    assert s.protocol == "teye" and uci_n_splits("concrete", "teye") == 5


@pytest.mark.parametrize("name", UCI_DATASETS)
def test_every_dataset_loads_split0(uci_dir: Path, name: str) -> None:
    s = load_uci(name, 0)
    n_rows = np.loadtxt(uci_dir / name / "index_train_0.txt").size + s.x_test.shape[0]
    assert s.x_train.shape[0] + s.x_val.shape[0] + s.x_test.shape[0] == n_rows
    for t in (s.x_train, s.y_train, s.x_val, s.y_val, s.x_test, s.y_test):
        assert torch.isfinite(t).all()
    assert s.x_train.shape[1] == s.scaler.n_features == s.n_features
    assert uci_n_splits(name) == (5 if name == "protein-tertiary-structure" else 20)


def test_standardizer_roundtrip_and_constant_feature() -> None:
    x = torch.tensor([[1.0, 5.0], [3.0, 5.0], [5.0, 5.0]])
    y = torch.tensor([2.0, 4.0, 6.0])
    sc = Standardizer.fit(x, y)
    assert sc.x_std.tolist() == [pytest.approx(np.std([1, 3, 5])), 1.0]  # constant -> std 1
    z = sc.transform_x(x)
    assert z[:, 1].abs().max() == 0
    torch.testing.assert_close(sc.inverse_x(z), x)
    torch.testing.assert_close(sc.inverse_y(sc.transform_y(y)), y)
    torch.testing.assert_close(sc.inverse_std(torch.ones(3)), torch.full((3,), sc.y_std))
    torch.testing.assert_close(sc.inverse_var(torch.ones(2, 3)), torch.full((2, 3), sc.y_std**2))
    back = Standardizer.from_dict(json.loads(json.dumps(sc.to_dict())))
    torch.testing.assert_close(back.x_mean, sc.x_mean)
    assert (back.y_mean, back.y_std) == (sc.y_mean, sc.y_std)
    with pytest.raises(ValueError, match=r"\[\.\.\., 2\]"):
        sc.transform_x(torch.zeros(4, 3))


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(DataError, match="bostonHousing.*yacht"):
        load_uci("boston")


def test_bad_split_index_gives_range(uci_dir: Path) -> None:
    with pytest.raises(DataError, match=r"0\.\.19"):
        load_uci("yacht", 20)
    with pytest.raises(DataError, match=r"0\.\.4"):
        load_uci("yacht", 5, protocol="teye")
    with pytest.raises(DataError, match=r"0\.\.4"):
        load_uci("protein-tertiary-structure", -1)
    with pytest.raises(DataError, match="protocol"):
        load_uci("yacht", 0, protocol="random")
    with pytest.raises(DataError, match="val_fraction"):
        load_uci("yacht", 0, val_fraction=1.0)


def test_missing_root_and_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        load_uci("yacht", root=tmp_path / "nowhere")
    with pytest.raises(DataError, match="yacht.*missing"):
        load_uci("yacht", root=tmp_path)


def _fake_dataset(root: Path, rows: list[str]) -> Path:
    folder = root / "uci" / "yacht"
    folder.mkdir(parents=True)
    (folder / "data.txt").write_text("\n".join(rows) + "\n")
    (folder / "index_features.txt").write_text("0\n1\n")
    (folder / "index_target.txt").write_text("2\n")
    (folder / "n_splits.txt").write_text("1\n")
    (folder / "index_train_0.txt").write_text("0\n1\n2\n")
    (folder / "index_test_0.txt").write_text("3\n")
    return folder


def test_nan_in_data_names_file_and_count(tmp_path: Path) -> None:
    _fake_dataset(tmp_path, ["1 2 3", "4 nan 6", "7 8 inf", "1 1 1"])
    with pytest.raises(DataError, match=r"data\.txt: 2 non-finite"):
        load_uci("yacht", root=tmp_path)


def test_fake_dataset_loads_and_missing_index_file(tmp_path: Path) -> None:
    folder = _fake_dataset(tmp_path, ["1 2 3", "4 5 6", "7 8 9", "1 1 1"])
    s = load_uci("yacht", root=tmp_path, val_fraction=0.0)
    assert s.x_train.shape == (3, 2) and s.y_test_original.tolist() == pytest.approx([1.0])
    (folder / "index_test_0.txt").unlink()
    with pytest.raises(DataError, match="index_test_0.txt"):
        load_uci("yacht", root=tmp_path)
