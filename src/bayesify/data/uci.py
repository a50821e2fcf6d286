"""UCI regression benchmarks with the standard split protocols.

Two protocols over the same ``uci/<name>/data.txt`` files (see ``uci/README.md`` in the data root):

* ``"gal"``: the 20 fixed 90/10 train/test splits (5 for protein) of Hernández-Lobato & Adams
  (2015) / Gal & Ghahramani (2016), read from ``index_train_<i>.txt`` / ``index_test_<i>.txt``.
* ``"teye"``: Teye et al. (2018)'s 5 random 80/20 splits, made with the legacy numpy generator:
  ``np.random.seed(split + 1); idx = arange(N); shuffle(idx); test = idx[:round(0.2 N)]``.
  (Teye et al. did not use naval-propulsion-plant; it is still allowed here.)

Validation rows are the LAST ``val_fraction`` of the training indices in file/permutation
order (Gal's 2018 protocol: ``n_fit = int(0.8 * n_train)``). Inputs and targets are normalised
with statistics of the fitting part only (training minus validation; population std, 0 -> 1).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from bayesify.options import SplitProtocol, parse_option, shown

from .errors import DataError
from .paths import resolve_root
from .standardize import Standardizer

__all__ = [
    "TEYE_N_SPLITS",
    "TEYE_TEST_FRACTION",
    "UCI_DATASETS",
    "RegressionSplit",
    "SplitProtocol",
    "load_uci",
    "teye_split_indices",
    "uci_n_splits",
]

logger = logging.getLogger(__name__)

UCI_DATASETS: tuple[str, ...] = (
    "bostonHousing",
    "concrete",
    "energy",
    "kin8nm",
    "naval-propulsion-plant",
    "power-plant",
    "protein-tertiary-structure",
    "wine-quality-red",
    "yacht",
)
TEYE_N_SPLITS = 5
TEYE_TEST_FRACTION = 0.2


def _parse_protocol(protocol: str | SplitProtocol) -> SplitProtocol:
    return parse_option(SplitProtocol, protocol, option="UCI split protocol", error=DataError)


def _check_name(name: str) -> None:
    if name not in UCI_DATASETS:
        raise DataError(f"unknown UCI dataset {name!r}; valid names: {', '.join(UCI_DATASETS)}")


@dataclass(frozen=True, eq=False)
class RegressionSplit:
    """One train/validation/test split of a UCI dataset, normalised with training statistics.

    Inputs are float32 ``[N, D]``, targets float32 ``[N]``, all in NORMALISED units (fitted on
    ``x_train``/``y_train`` only); ``*_index`` are the int64 row numbers in ``data.txt``.
    Use ``scaler.inverse_y`` / ``original_targets`` to get back to original target units.
    """

    x_train: torch.Tensor  # [N_train, D]
    y_train: torch.Tensor  # [N_train]
    x_val: torch.Tensor  # [N_val, D]  (N_val = 0 when val_fraction = 0)
    y_val: torch.Tensor  # [N_val]
    x_test: torch.Tensor  # [N_test, D]
    y_test: torch.Tensor  # [N_test]
    scaler: Standardizer
    name: str
    split: int
    protocol: str
    train_index: torch.Tensor  # [N_train] int64
    val_index: torch.Tensor  # [N_val] int64
    test_index: torch.Tensor  # [N_test] int64

    @property
    def n_features(self) -> int:
        return int(self.x_train.shape[1])

    def original_targets(self, part: str = "test") -> torch.Tensor:
        """Targets of ``part`` ("train", "val", "test") in original units, float64 ``[N]``."""
        if part not in ("train", "val", "test"):
            raise ValueError(f"part must be 'train', 'val' or 'test', got {part!r}")
        return self.scaler.inverse_y(getattr(self, f"y_{part}").double())

    @property
    def y_test_original(self) -> torch.Tensor:
        """Test targets in original units, float64 ``[N_test]``."""
        return self.original_targets("test")


@lru_cache(maxsize=32)
def _read_table_cached(path: str, mtime_ns: int, size: int) -> np.ndarray:
    try:
        arr = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except ValueError as e:
        raise DataError(f"{path}: cannot parse as a table of numbers ({e})") from None
    arr.flags.writeable = False
    return arr


def _read_table(path: Path) -> np.ndarray:
    """Whitespace-separated numbers -> read-only float64 array (cached per process)."""
    if not path.is_file():
        raise DataError(f"missing file {path}")
    st = path.stat()
    return _read_table_cached(str(path.resolve()), st.st_mtime_ns, st.st_size)


def _read_ints(path: Path) -> np.ndarray:
    """An index file (numbers, possibly written as floats) -> int64 ``[K]``."""
    vals = _read_table(path).reshape(-1)
    if vals.size == 0 or not np.all(np.isfinite(vals)) or np.any(vals != np.round(vals)):
        raise DataError(f"{path}: expected non-empty whole-number indices")
    return vals.astype(np.int64)


def _dataset_dir(name: str, root: str | Path | None) -> Path:
    _check_name(name)
    folder = resolve_root(root) / "uci" / name
    if not folder.is_dir():
        raise DataError(f"UCI dataset {name!r}: folder {folder} is missing")
    return folder


def uci_n_splits(
    name: str, protocol: str | SplitProtocol = "gal", root: str | Path | None = None
) -> int:
    """Number of splits of ``name`` under ``protocol`` (gal: ``n_splits.txt``; teye: 5)."""
    proto = _parse_protocol(protocol)
    if proto is SplitProtocol.TEYE:
        _check_name(name)
        return TEYE_N_SPLITS
    path = _dataset_dir(name, root) / "n_splits.txt"
    vals = _read_ints(path)
    if vals.size != 1 or vals[0] < 1:
        raise DataError(f"{path}: expected one positive integer")
    return int(vals[0])


def teye_split_indices(n_rows: int, split: int) -> tuple[np.ndarray, np.ndarray]:
    """Teye et al. (2018) split ``split`` (0..4, seed ``split + 1``) of ``n_rows`` rows.

    Returns ``(train [N - n_test], test [n_test])`` row indices in permutation order, with
    ``n_test = round(0.2 * n_rows)``. ``RandomState(seed).shuffle`` draws the same permutation
    as the legacy global ``np.random.seed(seed); np.random.shuffle``.
    """
    idx = np.arange(n_rows)
    np.random.RandomState(split + 1).shuffle(idx)
    n_test = int(round(TEYE_TEST_FRACTION * n_rows))
    return idx[n_test:], idx[:n_test]


def _load_columns(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """``data.txt`` -> inputs ``[N, D]`` and targets ``[N]`` (float64), checked finite."""
    data_path = folder / "data.txt"
    data = _read_table(data_path)
    features = _read_ints(folder / "index_features.txt")
    target = _read_ints(folder / "index_target.txt")
    if target.size != 1:
        raise DataError(f"{folder / 'index_target.txt'}: expected exactly one target column")
    cols = np.concatenate([features, target])
    if cols.min() < 0 or cols.max() >= data.shape[1]:
        raise DataError(
            f"{folder}: column indices {cols.tolist()} out of range for {data.shape[1]} columns"
        )
    used = data[:, cols]
    bad = ~np.isfinite(used)
    if bad.any():
        rows = np.unique(np.nonzero(bad)[0])
        raise DataError(
            f"{data_path}: {int(bad.sum())} non-finite values (NaN/inf) in used columns, "
            f"rows {rows[:5].tolist()}{' ...' if rows.size > 5 else ''}"
        )
    return used[:, :-1], used[:, -1]


def _check_indices(path_hint: str, idx: np.ndarray, n_rows: int) -> None:
    if idx.min() < 0 or idx.max() >= n_rows:
        raise DataError(f"{path_hint}: row indices outside 0..{n_rows - 1}")
    if np.unique(idx).size != idx.size:
        raise DataError(f"{path_hint}: duplicate row indices")


def load_uci(
    name: str,
    split: int = 0,
    *,
    protocol: str | SplitProtocol = "gal",
    val_fraction: float = 0.2,
    root: str | Path | None = None,
) -> RegressionSplit:
    """Load split ``split`` of UCI dataset ``name`` (one of ``UCI_DATASETS``).

    ``protocol``: ``"gal"`` (fixed split files, 0..n_splits-1) or ``"teye"`` (5 seeded 80/20
    splits, 0..4). The last ``val_fraction`` of the training indices (``n_fit =
    int((1 - val_fraction) * n_train)``) become validation rows; ``val_fraction=0`` gives empty
    ``[0, D]`` / ``[0]`` validation tensors. The scaler is fitted on the remaining rows only.
    """
    proto = _parse_protocol(protocol)
    folder = _dataset_dir(name, root)
    if not (isinstance(val_fraction, int | float) and 0.0 <= val_fraction < 1.0):
        raise DataError(f"val_fraction must be in [0, 1), got {shown(val_fraction)}")
    n_splits = uci_n_splits(name, proto, root=folder.parent.parent)
    if isinstance(split, bool) or not isinstance(split, int | np.integer):
        raise DataError(f"split must be an int, got {shown(split)}")
    if not 0 <= split < n_splits:
        raise DataError(
            f"split {split} out of range for {name!r} (protocol {proto.value!r}): "
            f"valid 0..{n_splits - 1}"
        )
    split = int(split)
    x, y = _load_columns(folder)
    n_rows = x.shape[0]
    if proto is SplitProtocol.GAL:
        train = _read_ints(folder / f"index_train_{split}.txt")
        test = _read_ints(folder / f"index_test_{split}.txt")
        _check_indices(str(folder / f"index_train_{split}.txt"), train, n_rows)
        _check_indices(str(folder / f"index_test_{split}.txt"), test, n_rows)
        if np.intersect1d(train, test).size:
            raise DataError(f"{folder}: split {split} train and test indices overlap")
    else:
        train, test = teye_split_indices(n_rows, split)
    n_fit = int((1.0 - val_fraction) * train.size)
    if n_fit < 1:
        raise DataError(f"{name!r} split {split}: val_fraction={val_fraction} leaves no rows")
    fit, val = train[:n_fit], train[n_fit:]
    scaler = Standardizer.fit(x[fit], y[fit])
    sizes = (fit.size, val.size, test.size)
    logger.debug("load_uci %s split %d (%s): train/val/test %s", name, split, proto.value, sizes)

    def xs(rows: np.ndarray) -> torch.Tensor:
        return scaler.transform_x(torch.from_numpy(x[rows])).float()  # [n, D]

    def ys(rows: np.ndarray) -> torch.Tensor:
        return scaler.transform_y(torch.from_numpy(y[rows])).float()  # [n]

    return RegressionSplit(
        x_train=xs(fit),
        y_train=ys(fit),
        x_val=xs(val),
        y_val=ys(val),
        x_test=xs(test),
        y_test=ys(test),
        scaler=scaler,
        name=name,
        split=split,
        protocol=proto.value,
        train_index=torch.from_numpy(fit.copy()),
        val_index=torch.from_numpy(val.copy()),
        test_index=torch.from_numpy(test.copy()),
    )
