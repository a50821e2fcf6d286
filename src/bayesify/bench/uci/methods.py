"""MC dropout, Bayes by Backprop, deep ensembles and MCBN on one network size: Gal &
Ghahramani's one-hidden-layer UCI net (batch norm for MCBN), τ fitted for the mixture's
log-likelihood (``noise_objective="pll"``). ``bayesify bench coverage`` builds its methods here;
the UCI tables themselves are ``bayesify bench uci``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from bayesify.methods import MCBN, BayesByBackprop, DeepEnsemble, MCDropout, Method
from bayesify.models import mlp

METHOD_NAMES = ("mc-dropout", "bbb", "ensemble", "mcbn")


@dataclass(frozen=True)
class Settings:
    epochs: int = 20
    batch_size: int = 32
    lr: float = 1e-2
    hidden: int = 50
    dropout: float = 0.05
    samples: int = 50
    members: int = 5


def build(method: str, d: int, s: Settings) -> Method:
    """A fresh method on Gal's one-hidden-layer network."""
    opts = {"noise_objective": "pll"}
    if method == "mc-dropout":
        return MCDropout(mlp(d, hidden=(s.hidden,), norm=None, dropout=s.dropout), **opts)
    if method == "bbb":
        net = mlp(d, hidden=(s.hidden,), norm=None)
        return BayesByBackprop(net, init_rho=-5.0, kl_schedule="linear", kl_warmup=0.3, **opts)
    if method == "ensemble":
        return DeepEnsemble(mlp(d, hidden=(s.hidden,), norm=None), members=s.members, **opts)
    if method == "mcbn":
        return MCBN(mlp(d, hidden=(s.hidden,), norm="batch"), bank_size=128, **opts)
    raise ValueError(f"unknown method {method!r}; valid: {', '.join(METHOD_NAMES)}")
