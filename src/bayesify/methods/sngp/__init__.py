"""SNGP: spectral-normalised hidden layers and a random-feature Gaussian-process output layer
with a Laplace posterior (``sngp.py``; its layers in ``bayesify.nn.spectral_norm`` and
``bayesify.nn.random_feature_gp``)."""

from bayesify.methods.sngp.sngp import SNGP, SNGPConfig

__all__ = ["SNGP", "SNGPConfig"]
