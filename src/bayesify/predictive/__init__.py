"""The predictive distribution: Monte Carlo samples with the sample axis first.

:class:`Predictive` (in :mod:`~bayesify.predictive.core`) is what every method returns; the
questions it answers about a regression mixture (CDF, exact quantiles, draws) are pure functions
in :mod:`~bayesify.predictive.mixture`, and classification prediction sets in
:mod:`~bayesify.predictive.sets`.
"""

from bayesify.predictive.core import CRPSForm, Predictive, Task

__all__ = ["CRPSForm", "Predictive", "Task"]
