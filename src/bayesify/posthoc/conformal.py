"""Split-conformal calibration of any method's predictive, fitted on validation data.

Conformal prediction turns a score of how badly the predictive fits a point into intervals or
sets with a finite-sample guarantee: if the calibration rows and a new row are exchangeable, the
new target is covered with probability at least ``level`` (and at most ``level + 1/(n+1)`` when
scores do not tie), whatever the method and however wrong its uncertainty is. It needs only a
:class:`~bayesify.predictive.Predictive`, so it works for every method.

* ``"normalized"`` (regression): score ``|y − μ| / σ`` with the predictive mean and total std;
  the interval is ``μ ± q̂ σ``. The score is unchanged by an affine change of units, so one
  calibration serves predictives in standardised and in original target units.
* ``"aps"`` (classification, Romano et al. 2020): classes ranked by mean probability; the score
  of the true class is the probability mass ranked above it (``randomized``: plus ``U ·`` its
  own, ``U ~ U(0, 1)``); the set holds every class whose score is ≤ q̂. Non-randomized, that is
  the smallest top set whose mass reaches q̂ (never empty, and all top-1 sets when the top-1
  accuracy exceeds the level: then coverage is above the level by more than 1/(n+1));
  randomized sets cover exactly but can be empty.
* ``"lac"`` (split conformal's least ambiguous sets, Sadinle et al. 2019): score ``1 − p̂_y``,
  the set every class with ``p̂_y ≥ 1 − q̂`` (smallest sets on average; can be empty).
* ``"raps"`` (Angelopoulos et al. 2021): APS plus ``lam · max(0, rank − k_reg)``, which keeps
  sets small when many unlikely classes share the tail.

q̂ for ``level`` is the ⌈(n+1)·level⌉-th smallest of the n calibration scores (infinite when
that exceeds n: the whole line or every class). The sorted scores are stored, so any level can be
asked later. For the guarantee the calibration rows must not have been used to train or to stop
training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bayesify.posthoc.conformal_scores import (
    CLASSIFICATION_KINDS,
    REGRESSION_KINDS,
    ConformalMethod,
    check_level,
    class_labels,
    kind_scores,
    regression_parts,
)
from bayesify.posthoc.sampling import SamplingPolicy
from bayesify.predictive import Predictive, Task

FORMAT_VERSION = 1
#: calibrations for several sampling policies (:class:`ConformalByPolicy`)
POLICIES_VERSION = 2


@dataclass(frozen=True, eq=False)  # scores are a tensor: compare fields, not objects
class Conformal:
    """A fitted conformal calibration: the score kind, its options and the sorted scores ``[n]``.

    Build it with :meth:`fit` (or :meth:`from_dict`); ask :meth:`interval` (regression) or
    :meth:`prediction_set` (classification) at any level.
    """

    method: ConformalMethod
    scores: Tensor  # sorted calibration scores [n], float64
    randomized: bool = False
    k_reg: int = 0
    lam: float = 0.0
    samples: int | None = None  # MC samples T of the calibration predictive (for reference)

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", ConformalMethod(self.method))
        if self.method is ConformalMethod.AUTO:
            raise ValueError("a fitted Conformal has a concrete method, not 'auto'")
        scores = torch.as_tensor(self.scores, dtype=torch.float64).reshape(-1)
        if len(scores) == 0 or not torch.isfinite(scores).all():
            raise ValueError("conformal scores must be a non-empty list of finite numbers")
        object.__setattr__(self, "scores", scores.sort().values)
        if isinstance(self.k_reg, bool) or not isinstance(self.k_reg, int) or self.k_reg < 0:
            raise ValueError(f"k_reg must be a non-negative int, got {self.k_reg!r}")
        if not isinstance(self.lam, int | float) or not math.isfinite(self.lam) or self.lam < 0:
            raise ValueError(f"lam must be a non-negative number, got {self.lam!r}")

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(
        cls,
        pred_val: Predictive,
        y_val: Tensor,
        *,
        method: ConformalMethod | str = ConformalMethod.AUTO,
        randomized: bool = False,
        k_reg: int = 1,
        lam: float = 0.01,
        generator: torch.Generator | None = None,
    ) -> Conformal:
        """Calibrate on a validation predictive and its targets ``y_val [N]``.

        ``randomized``, ``k_reg`` and ``lam`` concern classification (``k_reg``/``lam`` only
        RAPS); ``generator`` draws the randomized scores' U.
        """
        try:
            kind = ConformalMethod(method)
        except ValueError:
            valid = ", ".join(m.value for m in ConformalMethod)
            raise ValueError(f"unknown conformal method {method!r}; valid: {valid}") from None
        regression = pred_val.task is Task.REGRESSION
        if kind is ConformalMethod.AUTO:
            kind = ConformalMethod.NORMALIZED if regression else ConformalMethod.APS
        allowed = REGRESSION_KINDS if regression else CLASSIFICATION_KINDS
        if kind not in allowed:
            valid = ", ".join(m.value for m in allowed)
            raise ValueError(
                f"conformal method {kind.value!r} does not fit a {pred_val.task.value} "
                f"predictive; valid: auto, {valid}"
            )
        if kind in (ConformalMethod.APS, ConformalMethod.LAC):
            k_reg, lam = 0, 0.0
        if kind is ConformalMethod.LAC and randomized:
            raise ValueError("randomized scores are APS's and RAPS's, not lac's")
        if regression:
            mean, std = regression_parts(pred_val)
            y = pred_val._targets(y_val).to(torch.float64)
            scores = (y - mean).abs() / std
            return cls(kind, scores, samples=pred_val.num_samples)
        labels = class_labels(pred_val, y_val)
        score = kind_scores(kind, pred_val.mean, randomized, k_reg, lam, generator)  # [N, C]
        picked = score.gather(1, labels[:, None]).squeeze(1)
        return cls(kind, picked, randomized, k_reg, float(lam), pred_val.num_samples)

    # ------------------------------------------------------------------ queries
    @property
    def n(self) -> int:
        """Number of calibration rows."""
        return len(self.scores)

    def threshold(self, level: float) -> float:
        """q̂: the ⌈(n+1)·level⌉-th smallest calibration score (``inf`` when that exceeds n)."""
        level = check_level(level)
        k = math.ceil((self.n + 1) * level - 1e-9)
        return math.inf if k > self.n else float(self.scores[k - 1])

    def check_rows_for(self, level: float) -> None:
        """Refuse, in one line, a ``level`` whose q̂ is infinite for these n rows (the interval
        would be the whole line or the set every class): ⌈(n+1)·level⌉ > n."""
        if math.isinf(self.threshold(level)):
            need = math.ceil(level / (1 - level) - 1e-9)
            raise ValueError(
                f"the conformal calibration holds {self.n} row(s), too few for level {level:g} "
                f"(it needs at least {need}): calibrate on more rows or ask for a level up to "
                f"{self.n / (self.n + 1):.3g}"
            )

    def interval(self, pred: Predictive, level: float = 0.9) -> tuple[Tensor, Tensor]:
        """Conformal interval ``μ ± q̂ σ`` at ``level``: ``(lower [N], upper [N])``."""
        self._require(pred, REGRESSION_KINDS)
        mean, std = regression_parts(pred)
        half = self.threshold(level) * std
        dtype = pred.samples.dtype
        return (mean - half).to(dtype), (mean + half).to(dtype)

    def prediction_set(
        self, pred: Predictive, level: float = 0.9, *, generator: torch.Generator | None = None
    ) -> Tensor:
        """Conformal prediction set at ``level``: bool ``[N, C]`` (every class whose score is
        ≤ q̂; ``generator`` draws U for randomized sets)."""
        self._require(pred, CLASSIFICATION_KINDS)
        tau = self.threshold(level)
        score = kind_scores(self.method, pred.mean, self.randomized, self.k_reg, self.lam,
                              generator)  # fmt: skip
        if math.isinf(tau):
            return torch.ones_like(score, dtype=torch.bool)
        return score <= tau

    def _require(self, pred: Predictive, allowed: tuple[ConformalMethod, ...]) -> None:
        if self.method not in allowed:
            what = "interval" if allowed == REGRESSION_KINDS else "prediction_set"
            raise ValueError(
                f"{what} needs a conformal calibration for "
                f"{'regression' if allowed == REGRESSION_KINDS else 'classification'}; "
                f"this one is {self.method.value!r}"
            )
        expected = Task.REGRESSION if allowed == REGRESSION_KINDS else Task.CLASSIFICATION
        if pred.task is not expected:
            raise ValueError(f"a {self.method.value!r} calibration takes a {expected.value} "
                             f"predictive, got {pred.task.value}")  # fmt: skip

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: kind, options and the sorted scores as a list of floats."""
        return {
            "version": FORMAT_VERSION,
            "method": self.method.value,
            "randomized": self.randomized,
            "k_reg": self.k_reg,
            "lam": self.lam,
            "samples": self.samples,
            "scores": self.scores.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Conformal:
        """Rebuild what :meth:`to_dict` wrote; a missing or unknown field is a named error."""
        if not isinstance(d, dict):
            raise ValueError(f"a conformal calibration is a dict, got {type(d).__name__}")
        if d.get("version") == POLICIES_VERSION:  # a bundle's: one calibration per policy
            by_policy = ConformalByPolicy.from_dict(d).calibrations
            if len(by_policy) > 1:
                raise ValueError(
                    f"this calibration holds {len(by_policy)} sampling policies; read it with "
                    "ConformalByPolicy.from_dict and pick one with select(policy)"
                )
            return next(iter(by_policy.values()))
        if d.get("version") != FORMAT_VERSION:
            raise ValueError(
                f"conformal calibration version {d.get('version')!r} is not supported "
                f"(this bayesify reads version {FORMAT_VERSION})"
            )
        keys = {"version", "method", "randomized", "k_reg", "lam", "samples", "scores"}
        missing, unknown = {"method", "scores"} - set(d), set(d) - keys
        if missing or unknown:
            raise ValueError(
                f"conformal calibration fields: missing {sorted(missing)}, unknown "
                f"{sorted(unknown)}; valid: {sorted(keys)}"
            )
        try:
            method = ConformalMethod(d["method"])
        except ValueError:
            raise ValueError(f"unknown conformal method {d['method']!r}") from None
        return cls(
            method,
            torch.tensor(d["scores"], dtype=torch.float64),
            bool(d.get("randomized", False)),
            d.get("k_reg", 0),
            d.get("lam", 0.0),
            d.get("samples"),
        )


METADATA_KEY = "conformal"
_OPTIONS = ("randomized", "k_reg", "lam")


@dataclass(frozen=True, eq=False)
class ConformalByPolicy:
    """One :class:`Conformal` per sampling policy it was calibrated under (same score kind).

    Conformal validity needs calibration scores drawn with the same randomness law as the
    served ones, so the quantile is picked by the served policy (:meth:`select`).
    """

    calibrations: dict[SamplingPolicy | None, Conformal]

    def __post_init__(self) -> None:
        if not self.calibrations:
            raise ValueError("a conformal calibration needs at least one sampling policy")
        kinds = {(c.method, c.randomized, c.k_reg, c.lam) for c in self.calibrations.values()}
        if len(kinds) > 1:
            raise ValueError("calibrations for several policies must share score and options")

    @property
    def method(self) -> ConformalMethod:
        return next(iter(self.calibrations.values())).method

    @property
    def policies(self) -> list[SamplingPolicy | None]:
        return list(self.calibrations)

    def select(
        self, policy: SamplingPolicy, exact_mixture: bool = False
    ) -> tuple[Conformal, str | None]:
        """The calibration for ``policy`` and ``None``, or, when none was made under it, the
        nearest one and a one-line warning. Nearest: the fixed-T calibration with the most
        samples that are at most the fewest any served row gets (fewer samples, noisier
        scores: a wider quantile, typically over-covering); failing that the one with the
        fewest samples (coverage may then fall below the level). ``exact_mixture``: the
        method has finitely many distinct samples, drawn equally under every policy, so any
        calibration holds (the first, without a warning)."""
        if policy in self.calibrations:
            return self.calibrations[policy], None
        if exact_mixture:
            return next(iter(self.calibrations.values())), None
        fixed = sorted((p.least_samples, p) for p in self.calibrations if p and not p.is_adaptive)
        if not fixed:
            conf = next(iter(self.calibrations.values()))
            what = "an unrecorded sampling policy" if None in self.calibrations else (
                ", ".join(p.label() for p in self.calibrations if p))  # fmt: skip
            return conf, (f"conformal calibration made under {what}, served with "
                          f"{policy.label()}: coverage is not guaranteed")  # fmt: skip
        below = [p for t, p in fixed if t <= policy.least_samples]
        have = ", ".join(p.label() for _, p in fixed)
        fix = "recalibrate with bayesify calibrate --conformal --samples including it"
        if below:
            used = below[-1]
            return self.calibrations[used], (
                f"conformal intervals calibrated under {have}, not {policy.label()}: using "
                f"{used.label()} (fewer samples; coverage typically at or above the level, not "
                f"guaranteed); {fix}"
            )
        used = fixed[0][1]
        return self.calibrations[used], (
            f"conformal intervals calibrated under {have}, not {policy.label()}: using "
            f"{used.label()}; with fewer samples served, coverage may fall below the level; "
            f"{fix}"
        )

    def summary(self) -> dict[str, Any]:
        """What a model card shows: score kind, number of scores per policy and the policies'
        labels (no raw scores; ``calibration_samples``: T when the only policy is a fixed T)."""
        first = next(iter(self.calibrations.values()))
        labels = [p.label() if p else None for p in self.calibrations]
        out: dict[str, Any] = {
            "method": first.method.value,
            "n_scores": first.n,
            "policies": labels,
        }
        only = self.policies[0] if len(self.calibrations) == 1 else None
        if only is not None and not only.is_adaptive:
            out["calibration_samples"] = only.samples
        return out

    def to_dict(self) -> dict[str, Any]:
        first = next(iter(self.calibrations.values())).to_dict()
        return {
            "version": POLICIES_VERSION,
            **{k: first[k] for k in ("method", *_OPTIONS)},
            "calibrations": [
                {"policy": p.to_dict() if p else None, "scores": c.scores.tolist()}
                for p, c in self.calibrations.items()
            ],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ConformalByPolicy:
        """Read what :meth:`to_dict` wrote, or a single :class:`Conformal` (version 1; its
        policy is fixed T when it recorded ``samples``)."""
        if isinstance(d, dict) and d.get("version") == FORMAT_VERSION:
            conf = Conformal.from_dict(d)
            policy = SamplingPolicy.fixed(conf.samples) if conf.samples else None
            return cls({policy: conf})
        version = d.get("version") if isinstance(d, dict) else d
        if version != POLICIES_VERSION:
            raise ValueError(f"conformal calibration version {version!r} is not supported "
                             f"(this bayesify reads {FORMAT_VERSION} and "
                             f"{POLICIES_VERSION})")  # fmt: skip
        out: dict[SamplingPolicy | None, Conformal] = {}
        for item in d.get("calibrations") or []:
            p = item.get("policy")
            policy = SamplingPolicy.from_dict(p) if p else None
            one = {"version": FORMAT_VERSION, "method": d.get("method"), "scores": item["scores"],
                   **{k: d[k] for k in _OPTIONS if k in d},
                   "samples": policy.samples if policy else None}  # fmt: skip
            out[policy] = Conformal.from_dict(one)
        return cls(out)


def calibrate_conformal(
    method: Any,
    val: tuple[Tensor, Tensor],
    /,
    *,
    samples: int = 50,
    seed: int = 0,
    policies: list[SamplingPolicy] | None = None,
    **options: Any,
) -> Conformal:
    """Fit a :class:`Conformal` on ``val = (x, y)`` with ``method.predict(x, samples, seed=)``
    and store it in ``method.metadata["conformal"]`` (saved with the bundle); returns it.

    ``policies`` (default: fixed ``samples``) are the sampling policies to calibrate for, one
    set of scores each (:class:`ConformalByPolicy`; the predictor picks the one it serves); the
    one returned is that of fixed ``samples`` when calibrated, else the first.
    ``options`` go to :meth:`Conformal.fit` (``method="aps"``, ``randomized=True``, ...).
    Read it back from a loaded bundle with :meth:`ConformalByPolicy.from_dict`.
    """
    if not isinstance(val, tuple | list) or len(val) != 2:
        raise ValueError("val must be a pair (x, y) of validation inputs and targets")
    x, y = val
    given = options.pop("generator", None)
    policies = list(policies or [SamplingPolicy.fixed(samples)])
    fitted: dict[SamplingPolicy | None, Conformal] = {}
    for policy in policies:
        if policy.is_adaptive:
            pred = method.predict(x, "adaptive", seed=seed, tol=policy.tol, start=policy.start,
                                  max_samples=policy.max_samples)  # fmt: skip
        else:
            pred = method.predict(x, policy.samples, seed=seed)
        generator = given or torch.Generator().manual_seed(seed)
        fitted[policy] = Conformal.fit(pred, y, generator=generator, **options)
    method.metadata[METADATA_KEY] = ConformalByPolicy(fitted).to_dict()
    return fitted.get(SamplingPolicy.fixed(samples)) or fitted[policies[0]]
