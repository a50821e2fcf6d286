"""Evidential models: one pass gives a distribution over the likelihood's parameters per row.

``regression.py``: deep evidential regression (a Normal-Inverse-Gamma head);
``classification.py``: evidential classification (a Dirichlet from non-negative evidence);
``losses.py``: their training losses; ``one_pass.py``: the one-pass-then-draw sampling both share.
"""

from bayesify.methods.evidential.classification import (
    EvidentialClassifier,
    EvidentialClassifierConfig,
)
from bayesify.methods.evidential.regression import (
    EvidentialRegression,
    EvidentialRegressionConfig,
)

__all__ = [
    "EvidentialClassifier",
    "EvidentialClassifierConfig",
    "EvidentialRegression",
    "EvidentialRegressionConfig",
]
