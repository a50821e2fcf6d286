"""Monte Carlo dropout (`mc_dropout.py`)."""

from bayesify.methods.dropout.mc_dropout import MCDropout, MCDropoutConfig

__all__ = ["MCDropout", "MCDropoutConfig"]
