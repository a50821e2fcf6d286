"""What a call's sampling promises: the policy it draws under, the warning a one-draw
deferral threshold needs when served under another (:mod:`bayesify.posthoc.sampling`), and why
a bundle's calibrations do not hold under a policy (what a server refuses a request's own
adaptive sampling for)."""

from __future__ import annotations

from typing import Any

from bayesify.posthoc.conformal import ConformalByPolicy
from bayesify.posthoc.deferral import DeferralPolicy
from bayesify.posthoc.sampling import SamplingPolicy


def sampling_policy(samples: Any, adaptive: dict[str, Any]) -> SamplingPolicy:
    """The policy of a call: fixed ``samples``, or adaptive with its options (defaults of
    :func:`~bayesify.methods.core.adaptive.predict_adaptive`)."""
    if samples == "adaptive" or adaptive:
        return SamplingPolicy.adaptive(adaptive.get("tol", 0.0), adaptive.get("start", 8),
                                       adaptive.get("max_samples", 32))  # fmt: skip
    return SamplingPolicy.fixed(int(samples))


def deferral_note(
    policy: DeferralPolicy, served: SamplingPolicy, exact_mixture: bool = False
) -> str | None:
    """A warning when a one-draw deferral threshold is served under another sampling policy
    (none for an ``exact_mixture``: every policy draws its finitely many samples equally; none for
    a feature score, computed without samples)."""
    fitted = policy.validation.get("samples")
    if policy.decision is not None or (fitted and served == SamplingPolicy.fixed(fitted)):
        return None
    if exact_mixture or policy.feature_score:  # the score does not depend on the samples
        return None
    at = f"T={fitted}" if fitted else "an unrecorded sample count"
    return (
        f"deferral threshold fitted on one draw at {at}, served with {served.label()}: the "
        "deferral rate may differ from its target; recalibrate (bayesify calibrate fits a "
        "sequential decision that holds under any policy)"
    )


def unheld(
    policy: SamplingPolicy,
    conformal: ConformalByPolicy | None,
    deferral: DeferralPolicy | None,
    exact_mixture: bool = False,
) -> list[str]:
    """Why the bundle's calibrations do not hold under ``policy`` (empty: they do): a
    conformal calibration made under other policies only, a one-draw deferral threshold
    fitted at another fixed T. (A sequential deferral decision holds under any policy, and
    every calibration of an ``exact_mixture``: its finitely many distinct samples, drawn
    equally whatever the policy, give one predictive.)"""
    if exact_mixture:
        return []
    out = []
    if conformal is not None and policy not in conformal.calibrations:
        made = [p.label() for p in conformal.calibrations if p] or ["an unrecorded policy"]
        out.append(f"its conformal calibration was made under {', '.join(made)} only")
    if deferral is not None and deferral_note(deferral, policy):
        fitted = deferral.validation.get("samples")
        at = f"T={fitted}" if fitted else "an unrecorded sample count"
        out.append(f"its deferral threshold was fitted on one draw at {at}")
    return out
