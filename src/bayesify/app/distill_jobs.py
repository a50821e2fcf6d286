"""``bayesify distill``: a teacher bundle and a file of its inputs in, a student bundle out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bayesify.data.tables import read_arrays, read_table, table_format
from bayesify.methods import Distilled, distill, load


def read_inputs(path: Path, image_rows: bool) -> Any:
    """A file's rows as the teacher's ``predict`` takes them: a ``.npz`` array of inputs for a
    bundle without table features (images), else the whole table (CSV, Parquet, ``.npz``);
    a table's target and other columns are left for the bundle's preprocessing to ignore."""
    if image_rows and table_format(path) == "npz":
        return read_arrays(path)
    return read_table(path)


def distill_bundle(
    bundle: Path, data: Path, out: Path, *, net: str | None = None, overwrite: bool = False,
    **options: Any,
) -> Distilled:  # fmt: skip
    """Distil the bundle at ``bundle`` on the rows of ``data`` (``options``: those of
    :func:`bayesify.distill`) and save the student at ``out``; returns it."""
    teacher = load(bundle, net=net)
    prep = teacher.preprocessing
    rows = read_inputs(data, image_rows=prep is None or prep.features is None)
    student = distill(teacher, rows, teacher_source=str(bundle), **options)
    student.distillation["transfer"]["file"] = str(data)
    student.save(out, overwrite=overwrite)
    return student
