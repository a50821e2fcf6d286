"""Reference posteriors for small networks: full-batch NUTS over every weight (NumPyro and
JAX, the optional extra ``hmc``), stored draws, and convergence checks on the predictive.

The layer sits below ``bench`` (which scores every method against a reference) and above
``methods``; it imports NumPyro and JAX only when a chain runs or diagnostics are computed.
"""

from bayesify.reference.diagnostics import RHAT_LIMIT, predictive_diagnostics
from bayesify.reference.hmc import (
    IZMAILOV_PRIOR_STD,
    HMCConfig,
    HMCSamples,
    MissingExtra,
    sample_posterior,
)

__all__ = [
    "IZMAILOV_PRIOR_STD",
    "RHAT_LIMIT",
    "HMCConfig",
    "HMCSamples",
    "MissingExtra",
    "predictive_diagnostics",
    "sample_posterior",
]
