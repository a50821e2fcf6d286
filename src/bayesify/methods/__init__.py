"""Posterior approximations behind one interface; registry by name."""

from bayesify.methods.base import DEFAULT_MAX_ROWS, Method, MethodConfig
from bayesify.methods.deterministic import Deterministic
from bayesify.methods.mcbn import MCBN, MCBNConfig
from bayesify.methods.registry import METHODS, get_method, load, register_method

__all__ = [
    "DEFAULT_MAX_ROWS",
    "METHODS",
    "MCBN",
    "MCBNConfig",
    "Deterministic",
    "Method",
    "MethodConfig",
    "get_method",
    "load",
    "register_method",
]
