"""What a call's sampling promises: the policy it draws under, and the warning a one-draw
deferral threshold needs when served under another (:mod:`bayesify.posthoc.sampling`)."""

from __future__ import annotations

from typing import Any

from bayesify.posthoc.deferral import DeferralPolicy
from bayesify.posthoc.sampling import SamplingPolicy


def sampling_policy(samples: Any, adaptive: dict[str, Any]) -> SamplingPolicy:
    """The policy of a call: fixed ``samples``, or adaptive with its options (defaults of
    :func:`~bayesify.methods.adaptive.predict_adaptive`)."""
    if samples == "adaptive" or adaptive:
        return SamplingPolicy.adaptive(adaptive.get("tol", 0.0), adaptive.get("start", 8),
                                       adaptive.get("max_samples", 32))  # fmt: skip
    return SamplingPolicy.fixed(int(samples))


def deferral_note(policy: DeferralPolicy, served: SamplingPolicy) -> str | None:
    """A warning when a one-draw deferral threshold is served under another sampling policy."""
    fitted = policy.validation.get("samples")
    if policy.decision is not None or (fitted and served == SamplingPolicy.fixed(fitted)):
        return None
    at = f"T={fitted}" if fitted else "an unrecorded sample count"
    return (
        f"deferral threshold fitted on one draw at {at}, served with {served.label()}: the "
        "deferral rate may differ from its target; recalibrate (bayesify calibrate fits a "
        "sequential decision that holds under any policy)"
    )
