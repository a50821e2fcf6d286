"""Figures a person would rather look at: uncertainty–error plots, toy predictives, reliability
diagrams and regression calibration curves. Every function returns the matplotlib Figure and,
with ``path=``, saves it as a PNG."""

from bayesify.plots._figure import new_figure, save_figure

__all__ = ["new_figure", "save_figure"]
