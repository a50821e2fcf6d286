"""A small ResNet (He et al. 2016, CIFAR-style) with batch norm, for 28x28 or 32x32 images."""

from __future__ import annotations

from torch import Tensor, nn

from bayesify.models.registry import register_model


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity (or 1x1 projection) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


@register_model("resnet")
def resnet(
    in_channels: int = 1, num_classes: int = 10, *, depth: int = 8, width: int = 16
) -> nn.Sequential:
    """ResNet-``depth`` (depth = 6k + 2): ``[N, C, H, W]`` -> logits ``[N, num_classes]``.

    Three stages of k basic blocks with ``width``, ``2*width``, ``4*width`` channels.
    """
    if (depth - 2) % 6:
        raise ValueError(f"resnet depth must be 6k + 2 (8, 14, 20, ...), got {depth}")
    k = (depth - 2) // 6
    layers: list[nn.Module] = [
        nn.Conv2d(in_channels, width, 3, 1, 1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
    ]
    cin = width
    for stage, cout in enumerate((width, 2 * width, 4 * width)):
        for i in range(k):
            layers.append(BasicBlock(cin, cout, 2 if (stage > 0 and i == 0) else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)
