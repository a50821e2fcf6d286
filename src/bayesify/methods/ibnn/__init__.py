"""Node-based BNN: multiplicative node noise with a Gaussian-mixture posterior (`ibnn.py`)."""

from bayesify.methods.ibnn.ibnn import IBNN, IBNNConfig

__all__ = ["IBNN", "IBNNConfig"]
