"""Whether a method's weight-driven (epistemic) spread is negligible, and the one-line warning
that says so and what to change.

The epistemic share of a predictive over the rows predicted is

* regression: Σ_n Var_t[μ_t(x_n)] / Σ_n (Var_t[μ_t(x_n)] + E_t[σ²_t(x_n)]), the part of the
  total predictive variance the samples' disagreement gives;
* classification: Σ_n MI(x_n) / Σ_n H(x_n), the mutual information's part of the predictive
  entropy (nats).

Below :data:`NEGLIGIBLE_SHARE` (1%) the predictive is, to within 1%, the plain network's with
its noise: the method's randomness carries no uncertainty worth its cost. Methods that name what
to change (``Method.spread_hint``: SWAG, Laplace) warn with :class:`NegligibleSpreadWarning`;
the deterministic network, random by no design, never does.
"""

from __future__ import annotations

import math
import warnings

from bayesify.callsite import user_stacklevel
from bayesify.options import Task
from bayesify.predictive import Predictive

#: the epistemic share of the predictive variance (entropy) below which the spread is negligible
NEGLIGIBLE_SHARE = 0.01


class BayesifyWarning(UserWarning):
    """Base of bayesify's warnings: each message is one line (the CLI prints it as one)."""


class NegligibleSpreadWarning(BayesifyWarning):
    """A method's weight-driven spread is a negligible share of its predictive uncertainty."""


def epistemic_share(pred: Predictive) -> float:
    """The epistemic share of ``pred``'s uncertainty over its rows (nan: fewer than 2 samples
    or no uncertainty at all)."""
    if pred.num_samples < 2:
        return math.nan
    if pred.task is Task.CLASSIFICATION:
        part, total = float(pred.mutual_information.sum()), float(pred.entropy.sum())
    else:
        part, total = float(pred.epistemic_variance.sum()), float(pred.variance.sum())
    return part / total if total > 0 else math.nan


def check_spread(pred: Predictive, method: str, hint: str | None) -> float:
    """Warn (one line naming ``method`` and ``hint``, what to change) when ``pred``'s epistemic
    share is below :data:`NEGLIGIBLE_SHARE`; returns the share. ``hint`` None: never warns. The
    warning names the caller's line outside bayesify."""
    share = epistemic_share(pred)
    if hint is not None and share < NEGLIGIBLE_SHARE:
        what = "entropy" if pred.task is Task.CLASSIFICATION else "variance"
        warnings.warn(
            f"{method}: the weight-driven spread is negligible (epistemic share {share:.2%} of "
            f"the predictive {what}, below {NEGLIGIBLE_SHARE:.0%}); {hint}",
            NegligibleSpreadWarning,
            stacklevel=user_stacklevel(),
        )
    return share
