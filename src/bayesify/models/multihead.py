"""A multi-head network for continual learning: a shared ReLU body and one output head per task.

``net.head`` chooses the head a forward uses (an int attribute, not a weight); :func:`use_head`
sets it for a block. Split MNIST (Nguyen et al. 2018, Zenke et al. 2017) trains head t on task t
and predicts task t's inputs with head t.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from torch import Tensor, nn

from bayesify.models.registry import register_model
from bayesify.options import shown

__all__ = ["MultiHeadMLP", "head_count", "multihead_mlp", "use_head"]


class MultiHeadMLP(nn.Module):
    """``[N, *in]`` (flattened) -> shared ReLU layers -> head ``self.head``: ``[N, classes]``."""

    def __init__(self, in_features: int, classes: int, hidden: Sequence[int], heads: int) -> None:
        super().__init__()
        if heads < 1 or classes < 1 or any(h < 1 for h in hidden):
            raise ValueError(
                f"need heads >= 1, classes >= 1 and hidden widths >= 1, got heads={heads}, "
                f"classes={classes}, hidden={list(hidden)}"
            )
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.body = nn.Sequential(*layers)
        self.heads = nn.ModuleList(nn.Linear(width, classes) for _ in range(heads))
        self.head = 0

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.heads[self.head](self.body(x))
        return out


@register_model("multihead_mlp")
def multihead_mlp(
    in_features: int, classes: int = 2, hidden: Sequence[int] = (256, 256), heads: int = 5
) -> MultiHeadMLP:
    """A ReLU MLP with ``heads`` output heads of ``classes`` each (Split MNIST: 784 inputs,
    2 classes, 256-256, 5 heads)."""
    return MultiHeadMLP(in_features, classes, tuple(hidden), heads)


def head_count(net: nn.Module) -> int:
    """How many output heads ``net`` has (1 for a network without ``heads``)."""
    heads = getattr(net, "heads", None)
    return len(heads) if isinstance(heads, nn.ModuleList) else 1


@contextmanager
def use_head(net: nn.Module, head: int | None) -> Iterator[None]:
    """Run the block with ``net.head = head`` (None: leave it); restored afterwards."""
    if head is None:
        yield
        return
    n = head_count(net)
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < n:
        raise ValueError(
            f"head must be an int in 0..{n - 1} (the network has {n}), got {shown(head)}"
        )
    if n == 1 and not hasattr(net, "head"):
        yield
        return
    before = net.head
    setattr(net, "head", head)  # noqa: B010 (nn.Module types attributes as Tensor | Module)
    try:
        yield
    finally:
        setattr(net, "head", before)  # noqa: B010
