"""The next task of a continual-learning bundle (``bayesify train --continue-from BUNDLE``).

The bundle is a ``vcl`` bundle trained from a table; the new table is read through the bundle's
own preprocessing (its feature columns, categories, scaling and classes), so the network sees
the new task's rows exactly as it saw the first task's. Every row of the new table trains (the
coreset, if the bundle keeps one, is drawn from them); nothing is split off for validation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bayesify.app.table_jobs import label_strings
from bayesify.data.errors import DataError
from bayesify.data.preprocessing import describe_row_errors
from bayesify.data.tables import read_table
from bayesify.methods import VCL, load

__all__ = ["continue_from_bundle"]


def continue_from_bundle(
    bundle: str | Path, path: str | Path
) -> tuple[VCL, tuple[torch.Tensor, torch.Tensor]]:
    """The ``vcl`` method saved at ``bundle`` and the training tensors ``(x, y)`` of the table at
    ``path`` encoded by the bundle's preprocessing."""
    method = load(bundle)
    if not isinstance(method, VCL):
        raise ValueError(
            f"--continue-from {bundle} holds a {method.name} bundle; only a vcl bundle learns "
            "a next task (train the first task with --method vcl)"
        )
    prep = method.preprocessing
    if prep is None or prep.features is None or prep.target is None:
        raise ValueError(
            f"--continue-from {bundle} was not trained from a table; continue it in Python: "
            "bayesify.load(bundle).fit((x, y))"
        )
    frame = read_table(path)
    if prep.target not in frame.columns:
        raise DataError(f"{path}: no target column {prep.target!r} (the bundle's target)")
    missing = [f for f in prep.features if f not in frame.columns]
    if missing:
        raise DataError(f"{path}: no feature column(s) {missing[:5]} that the bundle reads")
    x, bad = prep.encode(frame)
    if bad:
        raise DataError(f"{path}: {describe_row_errors(bad)}")
    xt = prep.scale(torch.as_tensor(x, dtype=torch.float32))
    y_col = frame[prep.target]
    if prep.class_names is not None:
        labels = label_strings(y_col)
        unknown = sorted(set(labels) - set(prep.class_names))
        if unknown:
            raise DataError(
                f"{path}: target {prep.target!r} has classes {unknown[:5]} that the bundle does "
                f"not know (its classes: {prep.class_names[:10]})"
            )
        code = {c: i for i, c in enumerate(prep.class_names)}
        yt = torch.as_tensor(np.asarray([code[v] for v in labels], dtype=np.int64))
    else:
        import pandas as pd

        y = pd.to_numeric(y_col, errors="coerce").to_numpy(np.float64)
        if np.isnan(y).any():
            raise DataError(f"{path}: target {prep.target!r} has missing or non-numeric values")
        yt = torch.as_tensor((y - prep.y_mean) / prep.y_std, dtype=torch.float32)
    return method, (xt, yt)
