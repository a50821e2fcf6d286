"""Distillation into one-pass students: the student method (`distilled.py`), its training from a
teacher (`distill.py`, the `distill` function) and the transfer set (`transfer.py`)."""

from bayesify.methods.distillation.distilled import Distilled, DistilledConfig

__all__ = ["Distilled", "DistilledConfig"]
