"""Deep ensembles: M members of any member method (`ensemble.py`)."""

from bayesify.methods.ensemble.ensemble import DeepEnsemble, EnsembleConfig

__all__ = ["DeepEnsemble", "EnsembleConfig"]
