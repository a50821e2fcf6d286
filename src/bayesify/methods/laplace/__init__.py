"""The Laplace approximation: the method (`laplace.py`), its options (`config.py`), its curvature
(`curvature.py`), its prior precision by the marginal likelihood (`prior.py`), δ and σ² chosen on
validation data (`validation.py`) and its all-layer draws (`layers.py`)."""

from bayesify.methods.laplace.config import LaplaceConfig
from bayesify.methods.laplace.laplace import Laplace

__all__ = ["Laplace", "LaplaceConfig"]
