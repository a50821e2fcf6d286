"""What a :class:`~bayesify.predictor.core.Predictor`'s bundle is: its task, what it reads (input
shape, features, classes) and its JSON model card (``bayesify predict --card``, the server's
model metadata). :class:`BundleFacts` is a mixin of ``Predictor``."""

from __future__ import annotations

import json
from typing import Any

from bayesify.data.preprocessing import Preprocessing
from bayesify.methods import Distilled, Method
from bayesify.posthoc.conformal import METADATA_KEY as CONFORMAL_KEY
from bayesify.posthoc.conformal import ConformalByPolicy
from bayesify.predictive import Task


class BundleFacts:
    """The bundle's facts and model card (mixed into ``Predictor``)."""

    method: Method
    source: str | None
    default_samples: int
    conformal: ConformalByPolicy | None
    _prep: Preprocessing  # the bundle's, or an empty one

    @property
    def preprocessing(self) -> Preprocessing | None:
        return self.method.preprocessing

    @property
    def task(self) -> Task:
        return self.method.config.task

    @property
    def distilled_from(self) -> dict[str, Any] | None:
        """The teacher of a distilled student (method, config and weights digests, source);
        None for any other bundle. Answers served from a student carry it."""
        if not isinstance(self.method, Distilled):
            return None
        teacher = self.method.distillation.get("teacher") or {}
        return {k: teacher.get(k) for k in ("method", "config_hash", "weights_hash", "source")}

    @property
    def input_shape(self) -> tuple[int, ...] | None:
        shape = self._prep.input_shape or self.method.input_shape
        return tuple(shape) if shape is not None else None

    @property
    def feature_names(self) -> list[str] | None:
        return self._prep.features

    @property
    def class_names(self) -> list[str] | None:
        return self._prep.class_names

    @property
    def class_labels(self) -> list[Any] | None:
        """The classes as the labels records hand back: of the type the training table had
        (``int`` for whole-number classes), in ``class_names`` order."""
        return self._prep.class_labels

    def card(self) -> dict[str, Any]:
        """A JSON model card: what the bundle is, what it reads and what it returns."""
        m = self.method
        regression = self.task is Task.REGRESSION
        fields = (
            ["mean", "std", "epistemic_variance", "aleatoric_variance", "lower", "upper"]
            if regression
            else ["label", "probabilities", "entropy", "mutual_information", "expected_entropy",
                  "prediction_set"]
        )  # fmt: skip
        card: dict[str, Any] = {
            "bundle": self.source,
            "method": m.name,
            "task": self.task.value,
            "config": m.config.to_dict(),
            "input_shape": list(self.input_shape) if self.input_shape else None,
            "features": self.feature_names,
            "categories": self._prep.categories,
            "target": self._prep.target,
            "class_names": self.class_names,
            "label_type": self._prep.label_type or ("str" if self.class_names else None),
            "default_samples": self.default_samples,
            "intervals": "conformal" if self.conformal is not None else "predictive",
            "fields": [*fields, "samples"],
            "metadata": {**m.metadata, CONFORMAL_KEY: self.conformal.summary()}
            if self.conformal is not None
            else m.metadata,
        }
        if isinstance(m, Distilled):  # a one-pass student: what it learned from, and how
            card["distilled"] = m.distillation
        if regression:
            scale = self._prep.y_std or 1.0
            card["noise_variance"] = m.noise_variance * scale**2  # target units
        out: dict[str, Any] = json.loads(json.dumps(card, default=str))
        return out
