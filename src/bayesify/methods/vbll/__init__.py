"""Variational Bayesian last layers (Harrison, Willes & Snoek 2024): ``vbll.py`` holds the method,
``bounds.py`` its closed-form training bounds."""

from bayesify.methods.vbll.vbll import VBLL, VBLLConfig

__all__ = ["VBLL", "VBLLConfig"]
