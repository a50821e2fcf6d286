"""The served model: a :class:`~bayesify.predictor.Predictor` behind the server's checks.

``encode`` turns one request's JSON inputs into a checked float array (errors name the field);
``run`` is the one vectorised pass the micro-batcher calls for the rows of several requests,
and hands every request its own records (the predictor's, plus ``samples_used``) and columns.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from bayesify.data.preprocessing import FLOAT32_MAX, describe_row_errors, overflow_message
from bayesify.methods.core.ood import available_scores
from bayesify.posthoc.deferral import DeferralPolicy
from bayesify.posthoc.sampling import SamplingPolicy
from bayesify.predictive.ood import check_names
from bayesify.predictor.result import finite_rows
from bayesify.serve.rows import (
    InputError,
    boolean_features,
    check_table_rows,
    not_a_number,
    too_large,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Adaptive:
    """Adaptive sampling settings of the server (see :mod:`bayesify.methods.core.adaptive`)."""

    tol: float
    start: int = 8
    max_samples: int = 32


@dataclass(frozen=True)
class PassKey:
    """What a pass depends on besides its rows; requests with equal keys share a pass."""

    samples: int | None  # fixed T, or None for adaptive sampling
    level: float = 0.9
    #: a request's seed: its rows run in a pass of their own (draws do not depend on company)
    seed: int | None = None
    #: a request's own adaptive sampling (with ``samples`` None; None: the server's)
    adaptive: Adaptive | None = None
    #: OOD score names the records carry (``ood_<name>`` fields)
    scores: tuple[str, ...] = ()


@dataclass
class Answer:
    """One request's part of a pass: records (JSON-able) and columns (numpy, first axis N),
    or the ``error`` that kept its rows from being answered."""

    records: list[dict[str, Any]]
    columns: dict[str, np.ndarray]
    #: regression: each row's noise standard deviation per sample ``[n, T]``, or ``[n, 1]``
    #: when every sample has the same (what the monitor scores outcomes under)
    noise_std: np.ndarray | None = None
    error: str | None = None
    #: guarantees the answer does not carry (e.g. conformal calibrated under another policy)
    warnings: list[str] = field(default_factory=list)


def _first_bad(arr: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])


class ServedModel:
    """A predictor with the server's settings: name, default samples, adaptive sampling."""

    def __init__(
        self,
        predictor: Any,
        name: str,
        *,
        default_samples: int = 32,
        adaptive: Adaptive | None = None,
        int8: bool = False,
    ) -> None:
        self.predictor = predictor
        self.name = name
        self.default_samples = default_samples
        self.adaptive = adaptive
        self.int8 = int8
        self.policy = DeferralPolicy.from_metadata(predictor.method.metadata)
        prep = predictor.preprocessing
        #: per true/false feature, the category each boolean stands for (:mod:`.rows`)
        self.booleans = boolean_features(prep) if prep is not None else {}
        shape = predictor.input_shape
        self.input_shape: tuple[int, ...] | None = tuple(shape) if shape else None
        dtype = next((q.dtype for q in predictor.method.net.parameters()), torch.float32)
        #: inputs beyond this overflow the network's floating type
        self._largest = float(torch.finfo(dtype if dtype.is_floating_point else torch.float32).max)

    @classmethod
    def load(cls, bundle: str, name: str | None = None, *, int8: bool = False,
             defer_max_samples: int | None = None, **settings: Any) -> ServedModel:  # fmt: skip
        """Open a bundle (a clear ``BundleError``/``ValueError`` when it is missing, damaged or
        a pickle); ``int8``: dynamic int8 quantisation of the linear layers;
        ``defer_max_samples``: a lower cap on the sequential deferral decision's samples."""
        from pathlib import Path

        from bayesify.predictor import Predictor

        predictor = Predictor.load(bundle)
        predictor.defer_max_samples = defer_max_samples
        if int8:
            from bayesify.methods.core.quantize import quantize_int8

            quantize_int8(predictor.method)
        return cls(predictor, name or Path(bundle).resolve().name, int8=int8, **settings)

    @property
    def task(self) -> str:
        return self.predictor.task.value

    @property
    def class_names(self) -> list[str] | None:
        return self.predictor.class_names

    # ------------------------------------------------------------------ inputs
    def check_scores(self, names: list[str] | None, loc: list[str | int]) -> tuple[str, ...]:
        """A request's OOD score names, or an ``InputError`` at ``loc`` naming one the model
        cannot answer (unknown, or a feature score without its fit)."""
        if not names:
            return ()
        if self.task != "classification":
            raise InputError(loc, "OOD scores are for classification models")
        try:
            names_t = check_names(names)
        except ValueError as e:
            raise InputError(loc, str(e)) from None
        served = available_scores(self.predictor.method)
        for i, n in enumerate(names_t):
            if n not in served:
                raise InputError([*loc, i], f"{n} is not available for this model; available: "
                                 f"{', '.join(served)}")  # fmt: skip
        return names_t

    def encode(self, inputs: Any, field: str = "inputs") -> np.ndarray:
        """JSON rows -> the encoded float64 array ``[N, *input_shape]`` (raw units; table
        bundles: one column per number feature, one 0/1 column per category), or an
        ``InputError`` naming the field. Table bundles take ``{feature: value}`` objects or
        lists of values in feature order; other bundles lists of numbers."""
        loc: list[str | int] = ["body", field]
        if not isinstance(inputs, list) or not inputs:
            raise InputError(loc, "must be a non-empty list of rows")
        if self.predictor.feature_names:
            return self._encode_table(inputs, loc)
        if any(isinstance(row, dict) for row in inputs):
            raise InputError(loc, "this model reads unnamed rows (lists of numbers), not "
                             "{feature: value} objects")  # fmt: skip
        odd = not_a_number(inputs, [])
        if odd is not None:
            raise InputError([*loc, *odd[0]], f"{odd[1]}, not a number; inputs must be numbers")
        try:
            arr = np.asarray(inputs, dtype=np.float64)
        except OverflowError:
            where, _ = too_large(inputs)
            raise InputError([*loc, *where], "number too large for a float64") from None
        except (ValueError, TypeError):
            raise InputError(loc, "rows must be numbers, or nested lists of numbers of one "
                             "shape" + self._shape_hint()) from None  # fmt: skip
        return self.check_array(arr, loc)

    def check_array(self, arr: np.ndarray, loc: list[str | int]) -> np.ndarray:
        """Shape and finiteness of a float array ``[N, ...]`` against the bundle's input shape."""
        if arr.ndim == 1:
            if self.input_shape not in ((1,), None):
                raise InputError(loc, f"each row must be a list of numbers{self._shape_hint()}, "
                                 "got single numbers")  # fmt: skip
            arr = arr[:, None]
        if self.input_shape is not None:
            want = self.input_shape
            flat = math.prod(want)
            if tuple(arr.shape[1:]) == (flat,) and len(want) > 1:
                arr = arr.reshape(len(arr), *want)
            if tuple(arr.shape[1:]) != want:
                raise InputError(loc, f"each row must have shape {list(want)} (or {flat} "
                                 f"numbers), got {list(arr.shape[1:])}")  # fmt: skip
        if not np.isfinite(arr).all():
            bad = _first_bad(arr)
            what = "NaN" if np.isnan(arr[bad]) else "infinite"
            raise InputError([*loc, *bad], f"{what} value; inputs must be finite numbers")
        big = np.abs(arr) > min(self._largest, FLOAT32_MAX)
        if big.any():
            where = [int(i) for i in np.argwhere(big)[0]]
            raise InputError([*loc, *where], overflow_message(arr[tuple(where)]))
        return arr

    def _encode_table(self, inputs: list, loc: list[str | int]) -> np.ndarray:
        rows = check_table_rows(self.predictor.preprocessing, inputs, loc, self.booleans)
        # values beyond float32 or the bundle's bounds: the predictor's own per-row errors
        return self.encode_frame(rows, loc)

    def encode_frame(self, rows: Any, loc: list[str | int]) -> np.ndarray:
        """Table rows (a DataFrame, or lists/objects) -> the checked encoded array, through the
        predictor's preprocessing; unusable rows are an ``InputError`` naming the first row
        and listing every problem (the words ``bayesify predict`` and Python use)."""
        try:
            arr, bad = self.predictor.encode(rows)
        except ValueError as e:
            raise InputError(loc, str(e)) from None
        if bad:
            raise InputError([*loc, min(bad)], describe_row_errors(bad))
        return self.check_array(arr, loc)

    def check_encoded(self, arr: np.ndarray, loc: list[str | int]) -> np.ndarray:
        """An array of encoded columns sent by a client (v2): one-hot groups of exactly one 1
        among 0s and number columns within the bundle's bounds, or an ``InputError``."""
        prep = self.predictor.preprocessing
        bad = prep.check_encoded(arr) if prep is not None else {}
        if bad:
            raise InputError([*loc, min(bad)], describe_row_errors(bad))
        return arr

    def _shape_hint(self) -> str:
        return f" (each row {list(self.input_shape)})" if self.input_shape else ""

    # ------------------------------------------------------------------ the pass
    def run(self, key: Hashable, arrays: Sequence[np.ndarray]) -> list[Answer]:
        """One vectorised pass over the rows of several requests; an answer per request.

        A request whose rows the model cannot answer (inputs it refuses, outputs that are not
        finite numbers) gets an answer with ``error`` set, and the others their predictions:
        when the shared pass fails, each request is run on its own."""
        assert isinstance(key, PassKey)
        if key.seed is not None and len(arrays) > 1:  # seeded requests: one pass each
            return [a for arr in arrays for a in self.run(key, [arr])]
        try:
            return self._run(key, arrays)
        except ValueError as e:
            if len(arrays) == 1:
                return [Answer([], {}, error=str(e))]
        out = []
        for arr in arrays:
            try:
                out.extend(self._run(key, [arr]))
            except ValueError as e:
                out.append(Answer([], {}, error=str(e)))
        return out

    def _run(self, key: PassKey, arrays: Sequence[np.ndarray]) -> list[Answer]:
        x = np.concatenate(list(arrays)) if len(arrays) > 1 else arrays[0]
        if key.samples is None and (key.adaptive or self.adaptive) is not None:
            a = key.adaptive or self.adaptive
            res = self.predictor.predict(x, samples="adaptive", level=key.level, tol=a.tol,
                                         start=a.start, max_samples=a.max_samples,
                                         encoded=True, seed=key.seed,
                                         scores=key.scores)  # fmt: skip
        else:
            res = self.predictor.predict(x, samples=key.samples or self.default_samples,
                                         level=key.level, encoded=True, seed=key.seed,
                                         scores=key.scores)  # fmt: skip
        columns = dict(res.columns)
        if "samples_used" not in columns:
            columns["samples_used"] = np.full(len(x), res.predictive.num_samples)
        finite = finite_rows(columns, len(x))
        noise = None
        if res.predictive is not None and res.predictive.task.value == "regression":
            nv = res.predictive.noise_variance  # [T, N]
            nv = nv[:1] if bool((nv == nv[:1]).all()) else nv
            noise = nv.T.sqrt().cpu().double().numpy()  # [N, T] or [N, 1]
        records = res.records(samples=False)
        for r, u in zip(records, columns["samples_used"].tolist(), strict=True):
            r["samples_used"] = int(u)
        answers, start = [], 0
        for arr in arrays:
            stop = start + len(arr)
            bad = np.flatnonzero(~finite[start:stop])
            if len(bad):
                answers.append(Answer([], {}, error=f"row {int(bad[0])}: the model's output is "
                                      "not a finite number (an input far outside the range it "
                                      "was trained on?)"))  # fmt: skip
            else:
                answers.append(Answer(records[start:stop],
                                      {k: v[start:stop] for k, v in columns.items()},
                                      None if noise is None else noise[start:stop],
                                      warnings=list(res.warnings)))  # fmt: skip
            start = stop
        return answers

    def card(self) -> dict[str, Any]:
        """The predictor's card, kept small: the sampling served (no second ``samples``
        figure), the bundle's metadata without calibration scores or long lists."""
        card = self.predictor.card()
        card.pop("default_samples", None)  # what is served is card["sampling"]
        card["metadata"] = _brief_metadata(card.get("metadata") or {})
        card["name"] = self.name
        card["int8"] = self.int8
        card["sampling"] = (
            {"mode": "adaptive", "tol": self.adaptive.tol, "start": self.adaptive.start,
             "max_samples": self.adaptive.max_samples} if self.adaptive
            else {"mode": "fixed", "samples": self.default_samples}
        )  # fmt: skip
        card["deferral"] = self.policy.to_dict() if self.policy else None
        card["warnings"] = self.predictor.guarantee_notes(self.sampling_policy)
        return card

    @property
    def sampling_policy(self) -> SamplingPolicy:
        """The policy a request without ``samples`` is served with."""
        a = self.adaptive
        if a is not None:
            return SamplingPolicy.adaptive(a.tol, a.start, a.max_samples)
        return SamplingPolicy.fixed(self.default_samples)


#: lists in a bundle's metadata longer than this are given as their length in the model card
_CARD_LIST = 32


def _brief_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` for the model card: the deferral policy left out (the card gives it whole),
    the conformal calibration without its scores (their count instead; its sample count as
    ``calibration_samples``), any other long list as its length."""

    def brief(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: brief(x) for k, x in v.items()}
        if isinstance(v, list) and len(v) > _CARD_LIST:
            return f"{len(v)} values"
        return v

    out = {k: v for k, v in metadata.items() if k != "deferral"}
    conformal = out.get("conformal")
    if isinstance(conformal, dict) and "scores" in conformal:  # else already a summary
        out["conformal"] = {k: v for k, v in conformal.items() if k not in ("scores", "samples")}
        out["conformal"]["n_scores"] = len(conformal.get("scores") or [])
        if "samples" in conformal:
            out["conformal"]["calibration_samples"] = conformal["samples"]
    return brief(out)
