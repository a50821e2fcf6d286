"""A normalizing flow over the last layer's weights (`flow_posterior.py`)."""

from bayesify.methods.flow.flow_posterior import FlowConfig, FlowPosterior

__all__ = ["FlowConfig", "FlowPosterior"]
