"""SWAG and MultiSWAG: the methods (`swag.py`), the trajectory moments and weight draws
(`moments.py`) and the stochastic network (`net.py`)."""

from bayesify.methods.swag.swag import SWAG, MultiSWAG, MultiSWAGConfig, SWAGConfig

__all__ = ["SWAG", "MultiSWAG", "MultiSWAGConfig", "SWAGConfig"]
