"""``Predictor`` and ``PredictionResult``: a bundle + preprocessing -> per-row records."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from bayesify.data.errors import DataError
from bayesify.data.preprocessing import Preprocessing, RowErrors, describe_row_errors
from bayesify.methods import Method
from bayesify.methods.core.ood import feature_scores, score_rows
from bayesify.methods.registry import load as load_method
from bayesify.posthoc.conformal import METADATA_KEY as CONFORMAL_KEY
from bayesify.posthoc.conformal import ConformalByPolicy
from bayesify.posthoc.deferral import DeferralPolicy
from bayesify.posthoc.sampling import SamplingPolicy
from bayesify.posthoc.sequential import Draw, SequentialDecision, sample_subset
from bayesify.predictive import Predictive
from bayesify.predictive.ood import check_names
from bayesify.predictor.card import BundleFacts
from bayesify.predictor.columns import output_columns
from bayesify.predictor.guarantees import deferral_note, sampling_policy, unheld
from bayesify.predictor.result import OnError, PredictionResult, finite_rows

log = logging.getLogger(__name__)

#: MC samples T per prediction when neither the call nor the bundle says
DEFAULT_SAMPLES = 100


def _generator(seed: int | None, generator: torch.Generator | None) -> torch.Generator | None:
    if seed is None:
        return generator
    if generator is not None:
        raise ValueError("give either generator or seed, not both")
    return torch.Generator().manual_seed(seed)


def _check_level(level: float) -> float:
    if isinstance(level, bool) or not isinstance(level, int | float) or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1), got {level!r}")
    return float(level)


def _check_samples(samples: Any) -> int:
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be a positive integer, got {samples!r}")
    return int(samples)


class Predictor(BundleFacts):
    """A method with its bundle's preprocessing; see the package docstring for the API."""

    def __init__(self, method: Method, *, default_samples: int = DEFAULT_SAMPLES) -> None:
        if not isinstance(method, Method):
            raise TypeError(f"Predictor wraps a bayesify Method, got {type(method).__name__}")
        self.method = method
        self.default_samples = _check_samples(default_samples)
        shape = list(method.input_shape) if method.input_shape is not None else None
        self._prep: Preprocessing = method.preprocessing or Preprocessing(input_shape=shape)
        self.source: str | None = None
        conf = method.metadata.get(CONFORMAL_KEY)
        #: the bundle's conformal calibrations (one per sampling policy): intervals and
        #: prediction sets come from the one made under the policy served
        self.conformal = ConformalByPolicy.from_dict(conf) if conf else None
        #: finitely many distinct samples (ensemble members), drawn equally under every
        #: sampling policy: one predictive, so every calibration holds under every policy
        self.exact_mixture = method.distinct_samples() is not None
        self._warned: set[str] = set()
        #: most samples a sequential deferral decision may draw per row when lower than the
        #: bundle's (a latency budget); None: the decision the threshold was fitted under
        self.defer_max_samples: int | None = None

    @classmethod
    def load(
        cls, bundle: str | Path, net: nn.Module | str | None = None, device: str | None = None
    ) -> Predictor:
        """Open a bundle folder. ``net``: None (bayesify models and ``nn.Sequential`` networks
        are rebuilt from the bundle), ``"package.module:factory"`` or a fresh ``nn.Module``."""
        p = cls(load_method(bundle, net=net, device=device))
        p.source = str(bundle)
        return p

    # ------------------------------------------------------------------ prediction
    def predict(
        self,
        inputs: Any,
        samples: int | Literal["adaptive"] | None = None,
        level: float = 0.9,
        seed: int | None = None,
        *,
        generator: torch.Generator | None = None,
        on_error: OnError | str = OnError.FAIL,
        first_row: int = 0,
        with_samples: bool = True,
        encoded: bool = False,
        scores: Sequence[str] = (),
        **adaptive: Any,
    ) -> PredictionResult:
        """Records for raw ``inputs``; rows numbered from ``first_row`` in errors and ``rows``.

        ``seed`` (or a ``generator`` carried across calls, e.g. file chunks) makes the samples
        reproducible. ``on_error="skip"`` leaves unusable rows out and lists them in
        ``skipped``; ``"fail"`` raises a ``DataError`` naming the first. ``with_samples=False``
        leaves the per-row samples out of ``columns`` (T times larger than the other fields).
        ``encoded=True``: ``inputs`` are already what :meth:`encode` returns (a float array
        ``[N, *input_shape]``: one column per number feature and one 0/1 column per category,
        unscaled), e.g. rows checked and encoded once by a server.
        ``samples="adaptive"`` with ``tol``/``start``/``max_samples``: adaptive sampling
        (:mod:`bayesify.methods.core.adaptive`; a ``samples_used`` field per row).
        ``scores``: OOD score names (:data:`bayesify.OOD_SCORES`), each a field ``ood_<name>``
        per row (higher = more likely out of distribution).
        """
        if samples != "adaptive":
            samples = _check_samples(self.default_samples if samples is None else samples)
        level = _check_level(level)
        scores = check_names(scores)
        try:
            on_error = OnError(on_error)
        except ValueError:
            valid = ", ".join(o.value for o in OnError)
            raise ValueError(f"on_error must be one of {valid}, got {on_error!r}") from None
        generator = _generator(seed, generator)
        arr, bad = self._encoded(inputs) if encoded else self.encode(inputs, first_row)
        if bad and on_error is OnError.FAIL:
            raise DataError(
                f"{describe_row_errors(bad)}; use on_error='skip' to leave such rows out"
            )
        rows = np.arange(first_row, first_row + len(arr))
        if bad:
            keep = ~np.isin(rows, list(bad))
            arr, rows = arr[keep], rows[keep]
        if len(arr) == 0:
            return PredictionResult(None, self._empty_columns(), rows, bad, self.class_names)
        policy = sampling_policy(samples, adaptive)
        x = self._inputs(arr)
        pred = self._predictive(x, samples, generator, adaptive)
        warnings: list[str] = []
        cols = self._columns(pred, level, generator, policy, warnings)
        raw = None if self.method.preprocessing is None else torch.as_tensor(
            arr if arr.flags.writeable else arr.copy())  # fmt: skip
        ood = score_rows(self.method, pred, scores, x, raw)
        self._serving_columns(pred, cols, x, generator, policy, warnings, raw, ood)
        for name, s in ood.items():
            cols[f"ood_{name}"] = s.numpy()
        if not with_samples:
            del cols["samples"]
        for w in warnings:
            if w not in self._warned:  # once per predictor: a file's chunks, a server's passes
                self._warned.add(w)
                log.warning(w)
        finite = finite_rows(cols, len(rows))
        if not finite.all():  # a bundle without bounds, fed values far outside its training
            why = ("the model's output is not a finite number (an input far outside the range "
                   "it was trained on?)")  # fmt: skip
            out = {int(r): why for r in rows[~finite]}
            if on_error is OnError.FAIL:
                raise DataError(describe_row_errors(out))
            bad = {**bad, **out}
            pred, rows = pred[torch.as_tensor(finite)], rows[finite]
            cols = {k: v[finite] for k, v in cols.items()}
            if len(rows) == 0:
                return PredictionResult(None, self._empty_columns(), rows, bad, self.class_names,
                                        warnings)  # fmt: skip
        return PredictionResult(pred, cols, rows, bad, self.class_names, warnings)

    def predictive(
        self,
        inputs: Any,
        samples: int | str | None = None,
        seed: int | None = None,
        *,
        generator: torch.Generator | None = None,
        **adaptive: Any,
    ) -> Predictive:
        """The :class:`Predictive` of raw ``inputs`` in the units the records report
        (regression: the user's target units), without the per-row fields: what a deferral
        policy or a calibration is fitted on (``samples="adaptive"`` with ``tol``, ``start``,
        ``max_samples``: under adaptive sampling). Every row must be usable: a ``DataError``
        names the first that is not."""
        if samples != "adaptive":
            samples = _check_samples(self.default_samples if samples is None else samples)
        generator = _generator(seed, generator)
        return self._predictive(self.network_inputs(inputs), samples, generator, adaptive)

    def draw(
        self, inputs: Any, seed: int | None = None, *, generator: torch.Generator | None = None
    ) -> Draw:
        """``draw(rows, have, more)``: ``more`` fresh samples of the rows ``rows`` of raw
        ``inputs`` as a :class:`Predictive` in the records' units (what a sequential deferral
        decision is run and fitted on; :mod:`bayesify.posthoc.sequential`)."""
        return self._draw(self.network_inputs(inputs), _generator(seed, generator))

    def network_inputs(self, inputs: Any) -> torch.Tensor:
        """Raw ``inputs`` as the network takes them (encoded and scaled): ``[N, *input_shape]``.
        Every row must be usable: a ``DataError`` names the first that is not."""
        return self._inputs(self._usable(inputs))

    def _usable(self, inputs: Any) -> np.ndarray:
        arr, bad = self._prep.rows_to_array(inputs)
        if bad:
            raise DataError(describe_row_errors(bad))
        if len(arr) == 0:
            raise DataError("no rows to predict")
        return arr

    def _draw(self, x: torch.Tensor, generator: torch.Generator | None) -> Draw:
        """Fresh samples of rows of ``x`` round after round: the method's deterministic part
        (a distilled student: its whole network) runs once, on the first round that draws, and
        later rounds only sample (the same draws as ``method.sample`` on those rows)."""
        m = self.method
        sampler: Any = None  # made on first use: rows decided at once draw nothing more

        def draw(rows: torch.Tensor, have: int, more: int) -> Predictive:
            nonlocal sampler
            if sampler is None:
                sampler = m._prefix_sampler(x, generator, "auto") or False
            if sampler:
                out = sampler(rows, more)
            else:
                out = m.sample(x[rows.to(x.device)], more, generator=generator)
            return self._prep.outputs(m.to_predictive(out))

        return draw

    def encode(self, inputs: Any, first_row: int = 0) -> tuple[np.ndarray, RowErrors]:
        """Raw inputs -> encoded, unscaled float64 array ``[N, ...]`` and the unusable rows."""
        return self._prep.rows_to_array(inputs, first_row)

    def _encoded(self, inputs: Any) -> tuple[np.ndarray, RowErrors]:
        """Already encoded inputs, checked against the network's input shape, the bundle's
        bounds and one-hot groups (:meth:`Preprocessing.check_encoded`)."""
        arr = np.asarray(inputs, dtype=np.float64)
        shape = self.input_shape
        if shape is not None and arr.shape[1:] != shape:
            raise DataError(f"encoded inputs must have shape [N, {', '.join(map(str, shape))}], "
                            f"got {list(arr.shape)}")  # fmt: skip
        bad = self._prep.check_encoded(arr)
        return (np.where(np.isfinite(arr), arr, 0.0) if bad else arr), bad

    def _inputs(self, arr: np.ndarray) -> torch.Tensor:
        """Encoded rows -> the network's (scaled) inputs."""
        dtype = next((p.dtype for p in self.method.net.parameters()), torch.float32)
        if not arr.flags.writeable:  # e.g. a pandas frame's view; torch warns on those
            arr = arr.copy()
        return self._prep.scale(torch.as_tensor(arr, dtype=dtype))

    def _predictive(
        self,
        x: torch.Tensor,
        samples: Any,
        generator: torch.Generator | None,
        adaptive: dict[str, Any],
    ) -> Predictive:
        m = self.method
        if samples == "adaptive" or adaptive:
            from bayesify.methods.core.adaptive import predict_adaptive

            return predict_adaptive(m, x, samples, generator=generator,
                                    outputs=self._prep.outputs, **adaptive)  # fmt: skip
        return self._prep.outputs(m.to_predictive(m.sample(x, samples, generator=generator)))

    def _columns(
        self,
        pred: Predictive,
        level: float,
        generator: torch.Generator | None = None,
        policy: SamplingPolicy | None = None,
        warnings: list[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """The output fields, with the bundle's conformal calibration made under ``policy``
        (default fixed T of ``pred``; else the nearest, with a note in ``warnings``)."""
        policy = policy or SamplingPolicy.fixed(pred.num_samples)
        conformal = None
        if self.conformal is not None:
            conformal, note = self.conformal.select(policy, self.exact_mixture)
            if note and warnings is not None:
                warnings.append(note)
        return output_columns(pred, level, conformal, self.class_labels, generator)

    def _serving_columns(
        self,
        pred: Predictive,
        cols: dict[str, np.ndarray],
        x: torch.Tensor,
        generator: torch.Generator | None,
        policy: SamplingPolicy,
        warnings: list[str],
        raw: torch.Tensor | None = None,
        ood: dict[str, torch.Tensor] | None = None,
    ) -> None:
        """Adds ``defer``/``defer_score``/``defer_threshold`` with a deferral policy in the
        bundle (a sequential policy: ``defer_samples``, the samples its decision used; a
        feature score: taken from ``ood``, the OOD scores the call asked for, or computed at the
        network inputs ``x``), ``samples_used`` after adaptive sampling."""
        deferral = DeferralPolicy.from_metadata(self.method.metadata)
        if deferral is not None:
            if deferral.decision is None:
                name, row = deferral.score.value, None
                if deferral.feature_score:
                    row = (ood or {}).get(name)
                    if row is None:
                        row = feature_scores(self.method, [name], x, raw)[name]
                defer, score = deferral.decide(pred, row)
                note = deferral_note(deferral, policy, self.exact_mixture)
                if note:
                    warnings.append(note)
            else:
                decision = self.served_decision(deferral)
                first = self._first_samples(pred, policy, decision.start)
                res = deferral.run(self._draw(x, generator), len(pred), first, decision)
                defer, score = res.score > deferral.threshold, res.score
                cols["defer_samples"] = res.used.numpy()
            cols["defer"] = defer.numpy()
            cols["defer_score"] = score.numpy()
            cols["defer_threshold"] = np.full(len(score), deferral.threshold)
        used = getattr(pred, "samples_used", None)
        if used is not None:
            cols["samples_used"] = used.cpu().numpy()

    def _first_samples(
        self, pred: Predictive, policy: SamplingPolicy, start: int
    ) -> Predictive | None:
        """The served samples a sequential decision may start from (its first ``start``
        draws, drawn before anything depended on them), or None to draw afresh."""
        if policy.least_samples < start or self.method.sample_count(start) != start:
            return None
        return sample_subset(pred, torch.arange(start))

    def served_decision(self, deferral: DeferralPolicy) -> SequentialDecision:
        """The bundle's sequential decision, its most samples lowered to
        :attr:`defer_max_samples` where that is set and lower (never below its start)."""
        decision = deferral.decision
        assert decision is not None
        cap = self.defer_max_samples
        if cap is None or cap >= decision.max_samples:
            return decision
        return replace(decision, max_samples=max(cap, decision.start))

    def guarantee_notes(self, policy: SamplingPolicy) -> list[str]:
        """What the bundle's conformal calibration and deferral policy do not guarantee when
        served under ``policy`` (empty: both were fitted for it)."""
        notes = []
        if self.conformal is not None:
            notes.append(self.conformal.select(policy, self.exact_mixture)[1])
        deferral = DeferralPolicy.from_metadata(self.method.metadata)
        if deferral is not None:
            notes.append(deferral_note(deferral, policy, self.exact_mixture))
            fitted = deferral.decision
            served = self.served_decision(deferral) if fitted is not None else None
            if served is not None and fitted is not None and served != fitted:
                notes.append(f"the deferral decision draws at most {served.max_samples} "
                             f"samples per row, not the {fitted.max_samples} it was "
                             "fitted under: rows near the threshold may flip between "
                             "defer and accept more often than calibrated")  # fmt: skip
        return [n for n in notes if n]

    def unheld(self, policy: SamplingPolicy) -> list[str]:
        """Why the bundle's conformal calibration or deferral threshold does not hold under
        ``policy`` (empty: both hold, or the bundle has neither)."""
        deferral = DeferralPolicy.from_metadata(self.method.metadata)
        return unheld(policy, self.conformal, deferral, self.exact_mixture)

    def _empty_columns(self) -> dict[str, np.ndarray]:
        return {}
