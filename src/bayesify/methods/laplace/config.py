"""Laplace's options (:class:`LaplaceConfig`) and the combinations it refuses."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from bayesify.callsite import user_stacklevel
from bayesify.methods.core.config import MethodConfig
from bayesify.methods.core.spread import BayesifyWarning
from bayesify.options import (
    HessianStructure,
    LaplaceNoise,
    LaplacePredictive,
    LaplaceSubset,
    Link,
    PriorFit,
    Task,
)


@dataclass(frozen=True)
class LaplaceConfig(MethodConfig):
    """``subset``: last-layer | all (default: all for regression, whose last layer alone gives
    a nearly uniform spread, docs/fidelity.md; last-layer for classification and with
    ``hessian='full'``); ``hessian``: full | kfac | diag (full: last layer only);
    ``prior_fit``: marglik | grid; ``prior_precision``: a fixed δ instead (skips the fit);
    ``predictive``: glm | sampled; ``link``: mc | probit (classification; default mc: drawn
    logits, which carry the mutual information; probit: last layer, glm); ``noise_fit``:
    validation | marglik, where homoscedastic regression's σ² comes from (it scales the
    posterior and is the predictive's noise)."""

    subset: LaplaceSubset | None = None
    hessian: HessianStructure = HessianStructure.KFAC
    prior_fit: PriorFit = PriorFit.MARGLIK
    prior_precision: float | None = None
    predictive: LaplacePredictive = LaplacePredictive.GLM
    link: Link | None = None
    noise_fit: LaplaceNoise = LaplaceNoise.VALIDATION

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.subset is None:  # resolved here, as the link below, so a bundle names it
            # hessian='full' exists for the last layer only
            regression = self.task is Task.REGRESSION and self.hessian is not HessianStructure.FULL
            subset = LaplaceSubset.ALL if regression else LaplaceSubset.LAST_LAYER
            object.__setattr__(self, "subset", subset)
        if self.link is None and self.task is Task.CLASSIFICATION:
            # resolved here, so a bundle names the link it predicts with and a later change of
            # the default cannot change what a saved bundle predicts
            object.__setattr__(self, "link", Link.MC)
        all_layers = self.subset is LaplaceSubset.ALL
        if all_layers and self.hessian is HessianStructure.FULL:
            raise ValueError("hessian='full' is for subset='last-layer' (all layers: kfac or diag)")
        if self.link is not None and self.task is not Task.CLASSIFICATION:
            raise ValueError("link is a classification option (regression is Gaussian)")
        if self.link is Link.PROBIT and (
            all_layers or self.predictive is not LaplacePredictive.GLM
        ):
            raise ValueError(
                "link='probit' is for subset='last-layer' with predictive='glm'; use link='mc'"
            )
        if self.prior_precision is not None and not self.prior_precision > 0:
            raise ValueError(f"prior_precision must be > 0, got {self.prior_precision}")

    @property
    def probit(self) -> bool:
        """Whether predictions use the probit approximation (no draws)."""
        if self.task is not Task.CLASSIFICATION or self.subset is LaplaceSubset.ALL:
            return False
        if self.predictive is not LaplacePredictive.GLM:
            return False
        return self.link is Link.PROBIT

    @classmethod
    def from_saved(cls, d: dict[str, Any]) -> MethodConfig:
        if d.get("task") == Task.CLASSIFICATION.value and d.get("link") is None:
            warnings.warn(UNNAMED_LINK, BayesifyWarning, stacklevel=user_stacklevel())
        return super().from_saved(d)


#: a classification bundle saved before its link was written down: the default then was probit
UNNAMED_LINK = (
    "this Laplace bundle does not name its link: it predicts with link='mc' (drawn logits, "
    "the default since 2026-11-27); bundles saved before then predicted with the probit "
    "approximation: re-save the method with link='probit' to keep that"
)
