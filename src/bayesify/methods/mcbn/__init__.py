"""Monte Carlo batch normalisation: the method (`mcbn.py`) and its batch size chosen on validation
data (`tuning.py`)."""

from bayesify.methods.mcbn.mcbn import MCBN, MCBNConfig

__all__ = ["MCBN", "MCBNConfig"]
