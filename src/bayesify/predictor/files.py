"""Predictions for a file of rows, streamed chunk by chunk: the work behind ``bayesify predict``.

Memory is bounded by one chunk: rows are read ``chunk_rows`` at a time (CSV, Parquet; a
``.npz`` is read whole), predicted, and the chunk's records appended to the output before the
next is read. Rows that cannot be used are reported by row number (0-based, header excluded).
The output is written beside its path and renamed into place only when every row is done, so a
run that fails or is killed leaves an earlier output exactly as it was.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bayesify.atomic import atomic_path
from bayesify.data.errors import DataError
from bayesify.data.preprocessing import RowErrors, describe_row_errors
from bayesify.data.tables import TableWriter, count_rows, iter_table, read_arrays, table_format
from bayesify.predictive.ood import check_names
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
    """The side file listing skipped rows: ``<output stem>.skipped.csv`` beside the output
    (``pred.csv`` and ``pred.parquet`` -> ``pred.skipped.csv``)."""
    return output.with_name(output.stem + ".skipped.csv")


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name the same file (same resolved path, or hard links)."""
    try:
        if a.resolve() == b.resolve():
            return True
    except OSError:  # pragma: no cover - an unresolvable path is another file
        pass
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_side_file(side: Path, inputs: list[Path], overwrite: bool, what: str) -> None:
    """Refuse a side file (e.g. a skipped-rows list) that would replace one of ``inputs``, or
    an existing file without ``overwrite``; ``what`` says whose list it is."""
    for given in inputs:
        if same_file(side, given):
            raise ValueError(f"the skipped-rows list of {what} would be {side}, an input; "
                             "give the output another name")  # fmt: skip
    if side.exists() and not overwrite:
        raise FileExistsError(f"{side} exists (the skipped-rows list of {what}); pass "
                              "--overwrite to replace it")  # fmt: skip


def write_skipped(side: Path, parts: list[tuple[Path | None, RowErrors]]) -> Path:
    """Write skipped rows, one per line (``row``, ``reason``; a ``file`` column first where a
    part names its file), atomically; returns the path."""
    import pandas as pd

    frames = []
    for file, skipped in parts:
        rows = sorted(skipped)
        frame = pd.DataFrame({"row": rows, "reason": [skipped[r] for r in rows]})
        if file is not None:
            frame.insert(0, "file", str(file))
        frames.append(frame)
    with atomic_path(side) as tmp:
        pd.concat(frames, ignore_index=True).to_csv(tmp, index=False)
    return side


def _check_paths(input: Path, output: Path, on_error: OnError, overwrite: bool) -> None:
    if same_file(input, output):
        raise ValueError(f"the output {output} would overwrite the input; give --out another name")
    if output.exists() and not overwrite:
        raise FileExistsError(f"--out {output} exists; pass --overwrite to replace it")
    if on_error is OnError.SKIP:
        check_side_file(skipped_path(output), [input], overwrite, f"--out {output}")


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
    overwrite: bool = True,
    scores: Sequence[str] = (),
) -> FileSummary:
    """Predict every row of ``input`` and write one output row per kept input row to ``output``
    (format by suffix): ``row`` (input row number), the ``keep`` input columns, then the
    predictor's fields (``with_samples``: the T samples too, as JSON lists; ``scores``: OOD
    score names, a column ``ood_<name>`` each).

    ``seed`` seeds one generator used across chunks, so a file's output is reproducible for the
    same ``chunk_rows``. With ``on_error="skip"`` skipped rows are listed in
    :func:`skipped_path`. No file written may be the input; ``overwrite=False`` refuses an
    existing output or skipped-rows list. A run that predicts no row is an error that leaves an
    earlier output as it was (never an old file reported as new).
    """
    input, output = Path(input), Path(output)
    on_error = OnError(on_error)
    scores = check_names(scores)
    _check_paths(input, output, on_error, overwrite)
    table_format(output)  # check the suffix before any work
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    summary = FileSummary()
    total = count_rows(input) if table_format(input) != "npz" else None
    start = time.perf_counter()
    first = 0
    side = skipped_path(output)
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
                    scores=scores,
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
        if summary.skipped:
            summary.skipped_file = write_skipped(side, [(None, summary.skipped)])
        if summary.rows == 0:  # raised inside the block: the writer leaves no new file
            _raise_nothing_predicted(input, output, summary)
    summary.seconds = time.perf_counter() - start
    stale = not summary.skipped and (on_error is OnError.SKIP or overwrite)
    if stale and not same_file(side, input):  # an earlier run's list describes no output now
        side.unlink(missing_ok=True)
    return summary


def _raise_nothing_predicted(input: Path, output: Path, summary: FileSummary) -> None:
    kept = "left as it was" if output.exists() else "not written"
    if summary.skipped:
        raise DataError(f"no row of {input} could be predicted: all {len(summary.skipped)} "
                        f"were skipped (listed in {summary.skipped_file}); {output} was "
                        f"{kept}")  # fmt: skip
    raise DataError(f"{input} has no rows to predict; {output} was {kept}")
