"""Scoring a bundle on a table of labelled rows (``bayesify evaluate BUNDLE --data FILE``).

The rows go through the one predictor (:class:`~bayesify.predictor.Predictor`: the bundle's
preprocessing, the same reader as ``bayesify predict``), chunk by chunk with one generator, so
memory holds per-row figures, not the samples of the whole file. Figures come from
:mod:`bayesify.metrics` and the :class:`~bayesify.predictive.Predictive` (regression in the
target's units): regression RMSE, PLL/NLL, CRPS of the MC mixture, coverage and mean width of
its equal-tailed intervals and, with a conformal calibration in the bundle, of the conformal
ones; classification accuracy, NLL, Brier, ECE and prediction-set coverage and size; both the
epistemic share of the predictive variance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bayesify import metrics
from bayesify.app.table_jobs import label_strings
from bayesify.data.errors import DataError
from bayesify.data.preprocessing import RowErrors, describe_row_errors
from bayesify.data.tables import count_rows, iter_table, table_format
from bayesify.options import shown
from bayesify.posthoc.conformal import Conformal
from bayesify.posthoc.sampling import SamplingPolicy
from bayesify.predictive import Predictive, Task
from bayesify.predictor import OnError, Predictor
from bayesify.progress import progress_bar

#: interval and prediction-set levels scored when none are asked for
DEFAULT_LEVELS = (0.5, 0.8, 0.9, 0.95)
#: rows per block of the mixture-quantile root finding (temporaries [2L, T, rows] float64)
QUANTILE_ROWS = 2048
#: levels of the coverage-vs-level curve of the figure
CURVE_LEVELS = torch.linspace(0.01, 0.99, 99, dtype=torch.float64)


@dataclass
class Evaluation:
    """What :func:`evaluate_table` measured: ``scores`` (metric name -> value, in table
    order), the rows scored and skipped, and the per-row arrays the figure is drawn from."""

    task: Task
    scores: dict[str, float]
    rows: int
    skipped: RowErrors = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: per-row figures of the scored rows: ``y``, and ``pit`` (regression, the mixture CDF at
    #: y), ``conformal_score`` (regression with conformal) or ``probs`` (classification)
    per_row: dict[str, Tensor] = field(default_factory=dict)
    conformal: Conformal | None = None


def parse_levels(text: str) -> tuple[float, ...]:
    """``"0.8,0.9"`` -> ``(0.8, 0.9)``; each strictly between 0 and 1."""
    try:
        levels = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"levels are comma-separated numbers, got {shown(text)}") from None
    if not levels or any(not 0 < v < 1 for v in levels):
        raise ValueError(f"levels must lie strictly between 0 and 1, got {shown(text)}")
    return tuple(sorted(set(levels)))


def row_targets(
    predictor: Predictor, col: Any, target: str, first_row: int
) -> tuple[Tensor, RowErrors]:
    """The target column as ``[n]`` (regression: float64 numbers; classification: class
    indices in the bundle's order) and the rows whose target cannot be scored (their entries
    are 0)."""
    import pandas as pd

    n = len(col)
    bad: RowErrors = {}
    missing = col.isna().to_numpy()
    for i in np.flatnonzero(missing):
        bad[first_row + int(i)] = f"target {target!r}: missing value"
    if predictor.task is Task.REGRESSION:
        values = pd.to_numeric(col, errors="coerce").to_numpy(np.float64, na_value=np.nan)
        for i in np.flatnonzero(~np.isfinite(values) & ~missing):
            bad[first_row + int(i)] = f"target {target!r}: {shown(col.iloc[i])} is not a number"
        return torch.as_tensor(np.where(np.isfinite(values), values, 0.0)), bad
    codes = np.zeros(n, dtype=np.int64)
    ok = np.flatnonzero(~missing)
    labels = label_strings(col.iloc[ok]) if len(ok) else []
    names = predictor.class_names or []
    index = {c: j for j, c in enumerate(names)}
    numbered = bool(names) and not any(c.isdigit() for c in names)  # indices, not names
    for i, v in zip(ok, labels, strict=True):
        if v in index:
            codes[i] = index[v]
        elif (numbered or not names) and v.isdigit() and (not names or int(v) < len(names)):
            codes[i] = int(v)
        else:
            known = f"its classes: {names}" if names else "the bundle names no classes"
            bad[first_row + int(i)] = f"target {target!r}: unknown class {v!r} ({known})"
    return torch.as_tensor(codes), bad


def _inputs(predictor: Predictor, chunk: Any, target: str) -> Any:
    """The chunk's inputs: the frame (bundles with feature names) or the other columns as
    numbers."""
    if predictor.feature_names is not None:
        if target in predictor.feature_names:
            raise ValueError(f"--target {target!r} is one of the model's features")
        return chunk
    rest = chunk.drop(columns=[target])
    try:
        return rest.to_numpy(np.float64)
    except (TypeError, ValueError):
        raise DataError(f"columns besides the target {target!r} must be numbers; this bundle "
                        "reads numeric rows") from None  # fmt: skip


def _quantiles(pred: Predictive, levels: tuple[float, ...]) -> tuple[Tensor, Tensor]:
    """Equal-tailed mixture intervals at every level: ``(lower [L, n], upper [L, n])``."""
    qs = [q for lv in levels for q in ((1 - lv) / 2, (1 + lv) / 2)]
    parts = [pred[a : a + QUANTILE_ROWS].quantile(qs) for a in range(0, len(pred), QUANTILE_ROWS)]
    both = torch.cat(parts, dim=1).double()  # [2L, n]
    return both[0::2], both[1::2]


def _regression_rows(
    pred: Predictive, y: Tensor, levels: tuple[float, ...], conf: Conformal | None
) -> dict[str, Tensor]:
    y = y.to(pred.samples.dtype)
    out = {"y": y.double(), "mean": pred.mean.double(), "var": pred.variance.double(),
           "epistemic": pred.epistemic_variance.double(),
           "log_prob": pred.log_prob(y).double(), "crps": pred.crps(y).double(),
           "pit": pred.cdf(y).double()}  # fmt: skip
    lower, upper = _quantiles(pred, levels)
    yy = y.double()
    out["mc_covered"] = ((lower <= yy) & (yy <= upper)).double().T  # [n, L]
    out["mc_width"] = (upper - lower).T
    if conf is not None:
        out["conformal_score"] = (yy - out["mean"]).abs() / out["var"].sqrt()
        bounds = [conf.interval(pred, lv) for lv in levels]
        lo = torch.stack([b[0] for b in bounds]).double()
        hi = torch.stack([b[1] for b in bounds]).double()
        out["conformal_covered"] = ((lo <= yy) & (yy <= hi)).double().T
        out["conformal_width"] = (hi - lo).T
    return out


def _classification_rows(
    pred: Predictive, y: Tensor, levels: tuple[float, ...], conf: Conformal | None
) -> dict[str, Tensor]:
    labels = y.long()[:, None]
    out = {"y": y.double(), "probs": pred.mean.double(),
           "mi": pred.mutual_information.double(),
           "epistemic": pred.epistemic_variance.double().sum(-1),
           "var": pred.variance.double().sum(-1)}  # fmt: skip
    kinds = {"mc": lambda lv: pred.prediction_set(lv)}
    if conf is not None:
        kinds["conformal"] = lambda lv: conf.prediction_set(pred, lv)
    for kind, sets_at in kinds.items():
        sets = [sets_at(lv) for lv in levels]  # each [n, C] bool
        out[f"{kind}_covered"] = torch.stack([s.gather(1, labels).squeeze(1) for s in sets], 1)
        out[f"{kind}_size"] = torch.stack([s.sum(1) for s in sets], 1)
        out[f"{kind}_covered"] = out[f"{kind}_covered"].double()
        out[f"{kind}_size"] = out[f"{kind}_size"].double()
    return out


def _scores(task: Task, rows: dict[str, Tensor], levels: tuple[float, ...]) -> dict[str, float]:
    y = rows["y"]
    s: dict[str, float] = {}
    if task is Task.REGRESSION:
        pll = float(rows["log_prob"].mean())
        s.update(rmse=float(metrics.rmse(rows["mean"], y)), nll=-pll, pll=pll,
                 crps=float(rows["crps"].mean()))  # fmt: skip
        width = "width"
    else:
        probs, labels = rows["probs"], y.long()
        s.update(accuracy=1.0 - float(metrics.error_rate(probs, labels)),
                 nll=float(metrics.nll(probs, labels)),
                 brier=float(metrics.brier_score(probs, labels)),
                 ece=float(metrics.expected_calibration_error(probs, labels)),
                 mean_mi=float(rows["mi"].mean()))  # fmt: skip
        width = "size"
    total = float(rows["var"].sum())
    s["epistemic_share"] = float(rows["epistemic"].sum()) / total if total > 0 else 0.0
    for kind in ("mc", "conformal"):
        if f"{kind}_covered" not in rows:
            continue
        cov, wid = rows[f"{kind}_covered"].mean(0), rows[f"{kind}_{width}"].mean(0)
        for j, lv in enumerate(levels):
            s[f"coverage_{kind}@{lv:g}"] = float(cov[j])
            s[f"{width}_{kind}@{lv:g}"] = float(wid[j])
    return s


def evaluate_table(
    predictor: Predictor,
    path: str | Path,
    *,
    target: str | None = None,
    samples: int = 100,
    seed: int = 0,
    levels: tuple[float, ...] = DEFAULT_LEVELS,
    on_error: OnError | str = OnError.FAIL,
    limit: int | None = None,
    chunk_rows: int = 65536,
    progress: bool = True,
) -> Evaluation:
    """Score ``predictor``'s bundle on the labelled rows of the table at ``path`` (the
    ``target`` column; default the one the bundle was trained on), the first ``limit`` rows
    when given. ``on_error="skip"`` leaves out rows with unusable features or targets
    (``Evaluation.skipped``); ``"fail"`` raises one ``DataError`` naming them."""
    path, on_error = Path(path), OnError(on_error)
    prep = predictor.preprocessing
    target = target or (prep.target if prep is not None else None)
    if not target:
        raise ValueError("--target COLUMN is required: the bundle records no target column")
    if table_format(path) == "npz" and predictor.feature_names is None and prep is not None \
            and prep.input_shape is not None and len(prep.input_shape) > 1:  # fmt: skip
        raise ValueError(f"{path}: evaluate reads tables of rows; this bundle reads images")
    conf = None
    warnings: list[str] = []
    if predictor.conformal is not None:
        conf, note = predictor.conformal.select(
            SamplingPolicy.fixed(samples), predictor.exact_mixture
        )
        warnings += [note] if note else []
    generator = torch.Generator().manual_seed(seed)
    parts: list[dict[str, Tensor]] = []
    skipped: RowErrors = {}
    total = count_rows(path)
    total = min(total, limit) if total is not None and limit is not None else total or limit
    first = 0
    with progress_bar(total=total, unit="rows", progress=progress, desc="evaluate") as bar:
        for chunk in iter_table(path, chunk_rows):
            if limit is not None:
                chunk = chunk.iloc[: max(0, limit - first)]
                if len(chunk) == 0:
                    break
            if target not in chunk.columns:
                raise DataError(f"{path}: no target column {target!r}; columns: "
                                f"{list(chunk.columns)}")  # fmt: skip
            y, ybad = row_targets(predictor, chunk[target], target, first)
            inputs = _inputs(predictor, chunk, target)
            if on_error is OnError.FAIL:
                _, xbad = predictor.encode(inputs, first)
                if xbad or ybad:
                    raise DataError(f"{path}: {describe_row_errors({**xbad, **ybad})}; use "
                                    "--on-error skip to leave such rows out")  # fmt: skip
            res = predictor.predict(inputs, samples, generator=generator, on_error=on_error,
                                    first_row=first, with_samples=False)  # fmt: skip
            warnings += [w for w in res.warnings if w not in warnings]
            skipped.update(res.skipped)
            skipped.update({r: why for r, why in ybad.items() if r not in skipped})
            keep = ~np.isin(res.rows, list(ybad))
            if keep.any():
                pred = res.predictive[torch.as_tensor(keep)]
                yk = y[torch.as_tensor(res.rows[keep] - first)]
                if predictor.task is Task.REGRESSION:
                    parts.append(_regression_rows(pred, yk, levels, conf))
                else:
                    if int(yk.max()) >= pred.mean.shape[-1]:
                        raise DataError(f"{path}: class index {int(yk.max())} is out of range "
                                        f"for {pred.mean.shape[-1]} classes")  # fmt: skip
                    parts.append(_classification_rows(pred, yk, levels, conf))
            first += len(chunk)
            bar.update(len(chunk))
    if not parts:
        raise DataError(f"{path}: no row could be scored ({len(skipped)} skipped)")
    rows = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    scores = _scores(predictor.task, rows, levels)
    keep_keys = ("y", "pit", "conformal_score", "probs")
    per_row = {k: v for k, v in rows.items() if k in keep_keys}
    return Evaluation(predictor.task, scores, len(rows["y"]), skipped, warnings, per_row, conf)


def calibration_figure(ev: Evaluation, path: str | Path, title: str = "") -> None:
    """The calibration figure of an evaluation: a reliability diagram (classification) or a
    PIT histogram and coverage against level (regression)."""
    if ev.task is Task.CLASSIFICATION:
        from bayesify.plots.calibration import reliability_curves_diagram

        curve = metrics.reliability_curve(ev.per_row["probs"], ev.per_row["y"].long())
        reliability_curves_diagram({title: curve}, path=path)
        return
    from bayesify.plots.evaluation import pit_coverage_figure

    observed = {"MC interval": coverage_curve(ev.per_row["pit"])}
    if ev.conformal is not None and "conformal_score" in ev.per_row:
        q = torch.tensor([ev.conformal.threshold(float(lv)) for lv in CURVE_LEVELS])
        inside = ev.per_row["conformal_score"][None, :] <= q[:, None]
        observed["conformal"] = inside.double().mean(1)
    pit_coverage_figure(ev.per_row["pit"], CURVE_LEVELS, observed, path=path, title=title)


def coverage_curve(pit: Tensor, levels: Tensor = CURVE_LEVELS) -> Tensor:
    """Coverage of equal-tailed intervals at ``levels [L]`` from the PIT values ``[N]``: y lies
    in the central interval at level l exactly when (1 - l)/2 ≤ F(y) ≤ (1 + l)/2."""
    lo, hi = (1 - levels)[:, None] / 2, (1 + levels)[:, None] / 2
    return ((pit[None, :] >= lo) & (pit[None, :] <= hi)).double().mean(1)
