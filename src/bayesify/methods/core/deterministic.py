"""The plain network as a (degenerate) method: every sample is the same prediction."""

from __future__ import annotations

from bayesify.methods.core.base import Method


class Deterministic(Method):
    """No randomness at prediction: the baseline every Bayesian method is compared with."""

    name = "deterministic"
