"""Packed-Ensembles: M independent members packed into one network of grouped layers
(``packed_ensemble.py``; the layers and the surgery are :mod:`bayesify.nn.packed`)."""

from bayesify.methods.packed_ensemble.packed_ensemble import PackedEnsemble, PackedEnsembleConfig

__all__ = ["PackedEnsemble", "PackedEnsembleConfig"]
