"""DDU: a spectrally bounded deterministic classifier and a Gaussian density of its features
(``ddu.py``: the method; ``density.py``: the class-conditional Gaussians)."""

from bayesify.methods.ddu.ddu import DDU, DDUConfig

__all__ = ["DDU", "DDUConfig"]
