"""Bayes by Backprop, mean-field variational inference on the weights (`bayes_by_backprop.py`)."""

from bayesify.methods.bbb.bayes_by_backprop import BayesByBackprop, BBBConfig

__all__ = ["BayesByBackprop", "BBBConfig"]
