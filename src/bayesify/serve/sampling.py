"""The sampling of one request: the server's default, a fixed T, or adaptive sampling with the
request's own tolerance, start and maximum (``samples: "adaptive"``, v1 fields and v2
parameters alike). A request's adaptive policy is refused where the bundle's conformal
calibration or one-draw deferral threshold does not hold for it, unless it is the server's own
default (whose caveats ``/v1/model`` and every answer's ``warnings`` give)."""

from __future__ import annotations

import math
from typing import Any

from bayesify.methods.core.adaptive import check_options
from bayesify.options import shown
from bayesify.posthoc.sampling import SamplingPolicy
from bayesify.serve.model import Adaptive, ServedModel
from bayesify.serve.rows import InputError

#: the request fields (v1) or parameters (v2) of adaptive sampling
ADAPTIVE_FIELDS = ("tol", "start", "max_samples")


def _int(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def requested_sampling(
    model: ServedModel, fields: dict[str, Any], loc: list[str | int], max_samples: int
) -> tuple[int | None, Adaptive | None]:
    """``samples`` (and ``tol``/``start``/``max_samples``) of a request -> the pass's fixed T
    (None: the server's default) and the request's own adaptive sampling, or an
    ``InputError`` at ``[*loc, field]``. ``max_samples``: the most samples a request may ask."""
    samples = fields.get("samples")
    given = [k for k in ADAPTIVE_FIELDS if fields.get(k) is not None]
    if samples != "adaptive":
        if given:
            raise InputError([*loc, given[0]], 'only with samples "adaptive"')
        if samples is not None and not _int(samples, 1):
            raise InputError([*loc, "samples"], f'a positive integer or "adaptive", got '
                             f"{shown(samples)}")  # fmt: skip
        if samples is not None and samples > max_samples:
            raise InputError([*loc, "samples"], f"{samples}; at most {max_samples} per request")
        return samples, None
    served = model.adaptive
    tol = fields.get("tol")
    tol = served.tol if tol is None and served else tol
    start = fields.get("start") or (served.start if served else 8)
    most = fields.get("max_samples") or (served.max_samples if served else 32)
    if tol is None:
        raise InputError([*loc, "tol"], 'samples "adaptive" needs tol, the largest Monte Carlo '
                         "standard error of a row's mean (this server has no default)")  # fmt: skip
    if isinstance(tol, bool) or not isinstance(tol, int | float) or not 0 <= tol < math.inf:
        raise InputError([*loc, "tol"], f"a finite number >= 0, got {shown(tol)}")
    for name, v in (("start", start), ("max_samples", most)):
        if not _int(v, 2):
            raise InputError([*loc, name], f"an integer >= 2, got {shown(v)}")
    try:
        check_options(float(tol), start, most)
    except ValueError as e:
        raise InputError([*loc, "max_samples"], str(e)) from None
    if most > max_samples:
        raise InputError([*loc, "max_samples"], f"{most}; at most {max_samples} per request")
    asked = Adaptive(float(tol), start, most)
    if asked == served:
        return None, None  # the server's own policy, with the caveats it is served with
    policy = SamplingPolicy.adaptive(asked.tol, start, most)
    why = model.predictor.unheld(policy)
    if why:
        raise InputError([*loc, "samples"], f"{policy.label()} is not served for this bundle: "
                         f"{'; '.join(why)}; ask for a policy it was calibrated under, or a "
                         "fixed samples T (answered with a warning)")  # fmt: skip
    return None, asked
