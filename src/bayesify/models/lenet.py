"""A LeNet-style convolutional network for 28x28 grey images."""

from __future__ import annotations

from torch import nn

from bayesify.models.mlp import Norm, _norm
from bayesify.models.registry import register_model


@register_model("lenet")
def lenet(
    in_channels: int = 1,
    num_classes: int = 10,
    *,
    norm: Norm | str | None = "batch",
    dropout: float = 0.0,
    width: int = 1,
) -> nn.Sequential:
    """LeNet-5-style CNN: ``[N, C, 28, 28]`` -> logits ``[N, num_classes]``.

    conv5(20w) -> [BN] -> ReLU -> pool -> conv5(50w) -> [BN] -> ReLU -> pool -> FC 500w -> [BN]
    -> ReLU -> [dropout] -> FC. Convolutions feeding batch norm have no bias.
    """
    norm = _norm(norm)
    bn = norm is Norm.BATCH
    c1, c2, f = 20 * width, 50 * width, 500 * width

    def block2d(cin: int, cout: int) -> list[nn.Module]:
        out: list[nn.Module] = [nn.Conv2d(cin, cout, 5, padding=2, bias=not bn)]
        if bn:
            out.append(nn.BatchNorm2d(cout))
        return [*out, nn.ReLU(), nn.MaxPool2d(2)]

    layers: list[nn.Module] = [*block2d(in_channels, c1), *block2d(c1, c2), nn.Flatten()]
    layers.append(nn.Linear(c2 * 7 * 7, f, bias=not bn))
    if bn:
        layers.append(nn.BatchNorm1d(f))
    layers.append(nn.ReLU())
    if dropout > 0:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(f, num_classes))
    return nn.Sequential(*layers)
