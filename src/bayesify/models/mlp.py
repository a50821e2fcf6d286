"""Fully connected networks with optional batch norm and dropout."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from bayesify.models.registry import register_model
from bayesify.options import Norm, parse_option


def _norm(norm: Norm | str | None) -> Norm:
    return parse_option(Norm, Norm.NONE if norm is None else norm, option="norm")


@register_model("mlp")
def mlp(
    in_features: int,
    out_features: int = 1,
    hidden: Sequence[int] = (50, 50),
    *,
    norm: Norm | str | None = "batch",
    dropout: float = 0.0,
    input_dropout: float | None = None,
) -> nn.Sequential:
    """A ReLU MLP: ``[N, in_features]`` -> ``[N, out_features]``.

    With ``norm="batch"`` each hidden block is Linear (no bias, BN has one) -> BatchNorm1d -> ReLU,
    Teye et al.'s regression network. ``dropout`` is applied after each hidden block, and
    ``input_dropout`` (defaults to ``dropout``) to the inputs, as in Gal & Ghahramani's nets.
    """
    norm = _norm(norm)
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    if any(h < 1 for h in hidden):
        raise ValueError(f"hidden widths must be >= 1, got {tuple(hidden)}")
    input_dropout = dropout if input_dropout is None else input_dropout
    layers: list[nn.Module] = []
    if input_dropout > 0:
        layers.append(nn.Dropout(input_dropout))
    width = in_features
    for h in hidden:
        layers.append(nn.Linear(width, h, bias=norm is Norm.NONE))
        if norm is Norm.BATCH:
            layers.append(nn.BatchNorm1d(h))
        layers.append(nn.ReLU())
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = h
    layers.append(nn.Linear(width, out_features))
    return nn.Sequential(*layers)


@register_model("teye")
def teye_regression_net(in_features: int, *, hidden: int = 50) -> nn.Sequential:
    """Teye et al. 2018's UCI network: two hidden layers of ``hidden`` units (100 for protein)."""
    return mlp(in_features, 1, (hidden, hidden), norm="batch")
