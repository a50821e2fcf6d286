"""The one reader and writer of user tables: CSV, Parquet and ``.npz`` (pandas + pyarrow).

* :func:`read_table` reads a whole table (training data) into a DataFrame;
* :func:`iter_table` streams it in chunks of rows (prediction on files larger than memory:
  CSV through pyarrow's streaming reader, Parquet by record batches; ``.npz`` archives cannot be
  streamed and are read whole);
* :class:`TableWriter` writes DataFrames chunk by chunk, in the format of the file's suffix.

In a ``.npz``, every 1-D array is a column; a 2-D array ``k [N, F]`` gives columns ``k_0`` ..
``k_{F-1}``; an array with more axes (images ``[N, 1, 28, 28]``) is read by :func:`read_arrays`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from bayesify.atomic import Replacement

from .errors import DataError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "FORMATS",
    "TableWriter",
    "count_rows",
    "is_table_path",
    "iter_table",
    "read_arrays",
    "read_table",
    "table_format",
]

#: file suffix -> format
FORMATS: dict[str, str] = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".npz": "npz"}


def table_format(path: str | Path) -> str:
    """``"csv"``, ``"parquet"`` or ``"npz"`` from the file's suffix; a DataError otherwise."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise DataError(
            f"{path}: unknown table format {suffix or '(no suffix)'!r}; "
            f"valid suffixes: {', '.join(FORMATS)}"
        )
    return FORMATS[suffix]


def is_table_path(text: str) -> bool:
    """Whether ``--data`` names a file rather than a built-in dataset: it contains a path
    separator, ends in a file suffix, or exists."""
    return os.sep in text or "/" in text or bool(Path(text).suffix) or Path(text).exists()


def _check_file(path: Path) -> None:
    if not path.is_file():
        raise DataError(f"no such file {path}")


def _npz_frame(path: Path) -> pd.DataFrame:
    import pandas as pd

    cols: dict[str, np.ndarray] = {}
    with np.load(path, allow_pickle=False) as z:
        for k in z.files:
            a = z[k]
            if a.ndim == 1:
                cols[k] = a
            elif a.ndim == 2:
                cols.update({f"{k}_{j}": a[:, j] for j in range(a.shape[1])})
            else:
                raise DataError(
                    f"{path}: array {k!r} has shape {list(a.shape)}; a table holds 1-D columns "
                    "or 2-D [N, F] arrays"
                )
    lengths = {k: len(v) for k, v in cols.items()}
    if len(set(lengths.values())) > 1:
        raise DataError(f"{path}: arrays have different lengths {lengths}")
    return pd.DataFrame(cols)


def read_table(path: str | Path, columns: list[str] | None = None) -> pd.DataFrame:
    """A whole CSV / Parquet / ``.npz`` table as a DataFrame (``columns``: only these)."""
    import pandas as pd

    path = Path(path)
    fmt = table_format(path)
    _check_file(path)
    try:
        if fmt == "csv":
            frame = pd.read_csv(path, usecols=columns)
        elif fmt == "parquet":
            frame = pd.read_parquet(path, columns=columns)
        else:
            frame = _npz_frame(path)
            if columns is not None:
                frame = frame[columns]
    except (ValueError, OSError) as e:  # pyarrow and pandas parse errors subclass these
        raise DataError(f"{path}: cannot read as {fmt} ({str(e).splitlines()[0]})") from None
    if len(frame) == 0:
        raise DataError(f"{path}: the table has no rows")
    return frame


def read_arrays(path: str | Path) -> np.ndarray:
    """The one array of a ``.npz`` holding inputs ``[N, ...]`` (e.g. images)."""
    path = Path(path)
    _check_file(path)
    with np.load(path, allow_pickle=False) as z:
        if len(z.files) != 1:
            raise DataError(f"{path}: expected one array of inputs, found {z.files}")
        return z[z.files[0]]


def count_rows(path: str | Path) -> int | None:
    """Rows of a table without reading it into memory (for progress bars); None if unknown."""
    path = Path(path)
    fmt = table_format(path)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    if fmt == "npz":
        return None
    lines, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            lines += block.count(b"\n")
            last = block[-1:]
    return max(0, lines + (last != b"\n") - 1)  # minus the header


def iter_table(path: str | Path, chunk_rows: int = 65536) -> Iterator[pd.DataFrame]:
    """The table in chunks of at most ``chunk_rows`` rows, memory bounded by the chunk
    (CSV, Parquet); a ``.npz`` is read whole and then sliced."""
    import pandas as pd

    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    path = Path(path)
    fmt = table_format(path)
    _check_file(path)
    try:
        if fmt == "csv":
            # string columns stay strings; every chunk is parsed with the same column types
            yield from pd.read_csv(path, chunksize=chunk_rows)
        elif fmt == "parquet":
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk_rows):
                yield batch.to_pandas()
        else:
            frame = _npz_frame(path)
            for a in range(0, len(frame), chunk_rows):
                yield frame.iloc[a : a + chunk_rows]
    except (ValueError, OSError) as e:
        raise DataError(f"{path}: cannot read as {fmt} ({str(e).splitlines()[0]})") from None


class TableWriter:
    """Writes DataFrames chunk by chunk to CSV / Parquet (streamed) or ``.npz`` (kept in
    memory and written on close). Use as a context manager.

    Rows stream into a temporary file beside ``path`` that replaces ``path`` only when the
    block ends without an error (:mod:`bayesify.atomic`): a failed or killed run leaves an
    earlier file at ``path`` exactly as it was, and no new one."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.format = table_format(self.path)
        self._parquet: Any = None
        self._npz: list[pd.DataFrame] = []
        self._rows = 0
        if self.path.exists() and self.path.is_dir():
            raise DataError(f"{self.path} is a folder; the output is a file")
        self._new: Replacement | None = Replacement(self.path)
        self._tmp = self._new.path

    def write(self, frame: pd.DataFrame) -> None:
        if self.format == "csv":
            frame.to_csv(self._tmp, mode="a", header=self._rows == 0, index=False)
        elif self.format == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pandas(frame, preserve_index=False)
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self._tmp, table.schema)
            self._parquet.write_table(table.cast(self._parquet.schema))
        else:
            self._npz.append(frame)
        self._rows += len(frame)

    def close(self, error: BaseException | None = None) -> None:
        """Finish the file and put it in place; after an ``error``, remove it instead."""
        new, self._new = self._new, None
        if new is None:
            return
        try:
            if self._parquet is not None:
                self._parquet.close()
                self._parquet = None
            if error is None and self.format == "npz" and self._npz:
                import pandas as pd

                frame = pd.concat(self._npz, ignore_index=True)
                arrays = {k: frame[k].to_numpy() for k in frame.columns}
                arrays = {k: (v.astype(str) if v.dtype == object else v) for k, v in arrays.items()}
                with open(self._tmp, "wb") as f:
                    np.savez(f, **arrays)
            self._npz = []
            # a CSV of no rows is an empty file; Parquet and .npz of no rows: no file, as before
            if error is None and (self.format == "csv" or self._rows):
                new.commit()
        finally:
            new.discard()

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(value)
