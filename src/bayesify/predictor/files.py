"""Predictions for a file of rows, streamed chunk by chunk: the work behind ``bayesify predict``.

Memory is bounded by one chunk: rows are read ``chunk_rows`` at a time (CSV, Parquet; a
``.npz`` is read whole), predicted, and the chunk's records appended to the output before the
next is read. Rows that cannot be used are reported by row number (0-based, header excluded).
The output is written beside its path and renamed into place only when every row is done, so a
run that fails or is killed leaves an earlier output exactly as it was.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bayesify.atomic import atomic_path
from bayesify.data.errors import DataError
from bayesify.data.preprocessing import RowErrors, describe_row_errors
from bayesify.data.tables import TableWriter, count_rows, iter_table, read_arrays, table_format
from bayesify.predictor.core import Predictor
from bayesify.predictor.result import OnError
from bayesify.progress import progress_bar

#: rows read, predicted and written at a time
DEFAULT_CHUNK_ROWS = 65536


@dataclass
class FileSummary:
    """What :func:`predict_file` did."""

    rows: int = 0  # rows predicted and written
    skipped: RowErrors = field(default_factory=dict)
    seconds: float = 0.0
    skipped_file: Path | None = None  # where the skipped rows are listed (on_error="skip")

    @property
    def rows_per_second(self) -> float:
        return (self.rows + len(self.skipped)) / self.seconds if self.seconds > 0 else 0.0


def _chunks(predictor: Predictor, path: Path, chunk_rows: int):
    """Chunks of the input: DataFrames, or arrays ``[n, *shape]`` for a ``.npz`` of images."""
    if table_format(path) == "npz" and predictor.feature_names is None:
        arr = read_arrays(path)
        for a in range(0, len(arr), chunk_rows):
            yield arr[a : a + chunk_rows]
        return
    yield from iter_table(path, chunk_rows)


def _raise_every_bad_row(predictor: Predictor, chunk, rest, first: int) -> None:
    """On a failing chunk: read the rest of the file without predicting and raise one
    ``DataError`` listing the bad rows of the whole file (returns when the chunk's rows are
    all usable, i.e. the error was about something else)."""
    _, bad = predictor.encode(chunk, first)
    if not bad:
        return
    first += len(chunk)
    for more in rest:
        bad.update(predictor.encode(more, first)[1])
        first += len(more)
    raise DataError(f"{describe_row_errors(bad)}; use --on-error skip to leave such rows out")


def skipped_path(output: Path) -> Path:
    """The side file listing skipped rows: ``<output stem>.skipped.csv`` beside the output."""
    return output.with_name(output.stem + ".skipped.csv")


def predict_file(
    predictor: Predictor,
    input: str | Path,
    output: str | Path,
    *,
    samples: int | None = None,
    level: float = 0.9,
    seed: int | None = None,
    on_error: OnError | str = OnError.FAIL,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    keep: list[str] | None = None,
    with_samples: bool = False,
    progress: bool = True,
) -> FileSummary:
    """Predict every row of ``input`` and write one output row per kept input row to ``output``
    (format by suffix): ``row`` (input row number), the ``keep`` input columns, then the
    predictor's fields (``with_samples``: the T samples too, as JSON lists).

    ``seed`` seeds one generator used across chunks, so a file's output is reproducible for the
    same ``chunk_rows``. With ``on_error="skip"`` skipped rows are listed in
    :func:`skipped_path`.
    """
    input, output = Path(input), Path(output)
    on_error = OnError(on_error)
    if input.resolve() == output.resolve():
        raise ValueError(f"the output {output} would overwrite the input")
    table_format(output)  # check the suffix before any work
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    summary = FileSummary()
    total = count_rows(input) if table_format(input) != "npz" else None
    start = time.perf_counter()
    first = 0
    with (
        TableWriter(output) as writer,
        progress_bar(total=total, unit="rows", progress=progress, desc="predict") as bar,
    ):
        chunks = _chunks(predictor, input, chunk_rows)
        for chunk in chunks:
            try:
                res = predictor.predict(
                    chunk,
                    samples=samples,
                    level=level,
                    generator=generator,
                    on_error=on_error,
                    first_row=first,
                    with_samples=with_samples,
                )
            except DataError:
                _raise_every_bad_row(predictor, chunk, chunks, first)
                raise
            frame = res.frame(samples=with_samples)
            if keep:
                missing = [k for k in keep if k not in getattr(chunk, "columns", [])]
                if missing:
                    raise ValueError(f"--keep: the input has no column(s) {missing}")
                kept = chunk[keep].iloc[res.rows - first].reset_index(drop=True)
                frame = frame.iloc[:, :1].join(kept).join(frame.iloc[:, 1:])
            if len(frame):
                writer.write(frame)
            summary.rows += len(res)
            summary.skipped.update(res.skipped)
            first += len(chunk)
            bar.update(len(chunk))
    summary.seconds = time.perf_counter() - start
    side = skipped_path(output)
    if summary.skipped:
        import pandas as pd

        rows = sorted(summary.skipped)
        with atomic_path(side) as tmp:
            frame = pd.DataFrame({"row": rows, "reason": [summary.skipped[r] for r in rows]})
            frame.to_csv(tmp, index=False)
        summary.skipped_file = side
    else:
        side.unlink(missing_ok=True)  # an earlier run's list does not describe this output
    return summary
