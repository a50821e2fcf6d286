"""Continual learning: VCL (`vcl.py`), whose prior is the previous task's posterior, and its
coresets (`coreset.py`)."""

from bayesify.methods.continual.vcl import VCL, VCLConfig

__all__ = ["VCL", "VCLConfig"]
