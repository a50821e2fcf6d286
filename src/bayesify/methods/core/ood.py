"""Out-of-distribution scores of a method at inputs, by name (higher = more likely out of
distribution): the predictive's scores (:mod:`bayesify.predictive.ood`) and the feature scores,
``mahalanobis`` (a fit on training rows, :func:`fit_mahalanobis`) and ``density`` (the method's
own ``density_score``, where it has one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from bayesify.nn.features import penultimate_features
from bayesify.posthoc.deferral_scores import FEATURE_SCORES
from bayesify.posthoc.mahalanobis import METADATA_KEY, MahalanobisFit
from bayesify.predictive import Predictive
from bayesify.predictive.ood import LOGIT_SCORES, OOD_SCORES, check_names

#: the scores of the network's features rather than of its predictive (those deferral takes)
FEATURE_NAMES = tuple(s.value for s in FEATURE_SCORES)


def features(method: Any, x: Tensor, batch_size: int = 256) -> Tensor:
    """The penultimate features ``[N, D]`` of ``method``'s network at network inputs ``x``
    (already preprocessed): the inputs of its output layer, the deterministic network (no
    sampling); an ensemble's: its first member's."""
    net = method.net
    members = getattr(net, "members", None)
    if members is not None and len(members) > 0:
        net = members[0]
    try:
        return penultimate_features(net, x.to(method.device), batch_size)
    except ValueError as e:
        raise ValueError(f"{type(method).__name__}: {e}") from None


def fit_mahalanobis(method: Any, x: Any, y: Any, *, batch_size: int = 256) -> MahalanobisFit:
    """Fit the Mahalanobis score (Lee et al. 2018) of a classification ``method`` on training
    rows ``x`` (raw, as :meth:`~bayesify.methods.Method.predict` takes them) and labels
    ``y [N]``; stored in ``method.metadata["mahalanobis"]`` (saved with the bundle), whence
    ``"mahalanobis"`` is scored by name. Returns the fit."""
    return fit_mahalanobis_inputs(method, _network_inputs(method, x), y, batch_size=batch_size)


def fit_mahalanobis_inputs(
    method: Any, x: Tensor, y: Any, *, batch_size: int = 256
) -> MahalanobisFit:
    """:func:`fit_mahalanobis` on network inputs ``x`` (already preprocessed, e.g. a built-in
    dataset's split)."""
    if method.config.task.value != "classification":
        raise ValueError(f"{type(method).__name__}: the Mahalanobis score is for "
                         "classification")  # fmt: skip
    fit = MahalanobisFit.fit(features(method, x, batch_size), torch.as_tensor(y))
    method.metadata[METADATA_KEY] = fit.to_dict()
    return fit


def available_scores(method: Any, pred: Predictive | None = None) -> tuple[str, ...]:
    """The OOD score names ``method`` answers (``pred``: one of its predictives, which says
    whether it has logits): the logit scores where its outputs are logits, ``mahalanobis``
    once fitted, ``density`` where it has ``density_score``."""
    out = []
    for name in OOD_SCORES:
        if name in LOGIT_SCORES and pred is not None and pred.max_logits is None:
            continue
        if name == "mahalanobis" and METADATA_KEY not in method.metadata:
            continue
        if name == "density" and not callable(getattr(method, "density_score", None)):
            continue
        out.append(name)
    return tuple(out)


def score_rows(
    method: Any, pred: Predictive, names: Any, x: Tensor, raw: Any = None
) -> dict[str, Tensor]:
    """The scores ``names`` ``[N]`` (float64, CPU) of the rows of ``pred``, whose network
    inputs are ``x`` (``raw``: the same rows as the caller gave them, for ``density_score``;
    default ``x``). A name the method cannot answer is a one-line ``ValueError`` naming it."""
    names = check_names(names)
    out = feature_scores(method, [n for n in names if n in FEATURE_NAMES], x, raw)
    for name in names:
        if name in LOGIT_SCORES and pred.max_logits is None:
            raise ValueError(f"{name}: {type(method).__name__} gives class probabilities, not "
                             "logits; use max_prob, entropy or mutual_information")  # fmt: skip
        if name not in out:
            out[name] = pred.ood_score(name).cpu()
    return {name: out[name] for name in names}


def feature_scores(
    method: Any, names: Sequence[str], x: Tensor, raw: Any = None
) -> dict[str, Tensor]:
    """The feature scores ``names`` (of :data:`FEATURE_NAMES`) ``[N]`` (float64, CPU) at
    network inputs ``x``; no predictive needed. ``density`` is minus the method's feature log
    density: its ``input_log_density(x)`` where it has one, else ``density_score(raw)``
    (``raw``: the rows as the caller gave them; default ``x``)."""
    who = type(method).__name__
    out: dict[str, Tensor] = {}
    for name in names:
        if name == "mahalanobis":
            if METADATA_KEY not in method.metadata:
                raise ValueError(f"mahalanobis: {who} has no Mahalanobis fit; fit it on training "
                                 "rows first (bayesify.fit_mahalanobis(method, x, y), or "
                                 "bayesify calibrate --mahalanobis)")  # fmt: skip
            fit = MahalanobisFit.from_dict(method.metadata[METADATA_KEY])
            out[name] = fit.score(features(method, x))
        elif name == "density":
            on_inputs = getattr(method, "input_log_density", None)
            density = getattr(method, "density_score", None)
            if not callable(density):
                raise ValueError(f"density: {who} has no fitted feature density "
                                 "(density_score)")  # fmt: skip
            with torch.no_grad():
                if callable(on_inputs):
                    log_q = torch.as_tensor(on_inputs(x.to(method.device)))
                else:
                    log_q = torch.as_tensor(density(x if raw is None else raw))
            out[name] = -log_q.detach().double().cpu().reshape(-1)
        else:
            raise ValueError(f"{name!r} is not a feature score (one of {', '.join(FEATURE_NAMES)})")
    return out


def ood_scores(
    method: Any,
    x: Any,
    names: Sequence[str] | None = None,
    *,
    samples: int = 50,
    seed: int | None = None,
    pred: Predictive | None = None,
) -> dict[str, Tensor]:
    """The OOD scores ``names`` (default: every score ``method`` answers) at raw inputs ``x``
    (as :meth:`~bayesify.methods.Method.predict` takes them): ``{name: [N]}`` float64, higher
    = more likely out of distribution. ``pred``: the predictive at ``x`` when the caller has
    it, else ``method.predict(x, samples, seed=seed)``."""
    if pred is None:
        pred = method.predict(x, samples=samples, seed=seed)
    names = names or available_scores(method, pred)
    return score_rows(method, pred, names, _network_inputs(method, x), x)


def _network_inputs(method: Any, x: Any) -> Tensor:
    prep = method.preprocessing
    if prep is not None:
        out: Tensor = prep.inputs(x)
        return out
    return torch.as_tensor(x, dtype=method._dtype())
