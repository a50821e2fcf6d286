"""Test-time augmentation around a member method (`tta.py`)."""

from bayesify.methods.tta.tta import TTA, TTAConfig

__all__ = ["TTA", "TTAConfig"]
