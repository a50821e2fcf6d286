"""Monte Carlo dropout (Gal & Ghahramani 2016).

Train with dropout as usual; at prediction every one of the ``T*N`` rows gets its own dropout
mask in one pass while batch norm stays in inference mode (``.eval()`` does not switch the masks
off, and sampling never puts batch norm in training mode).

Optional prior length-scale ``l``: the weight decay of Gal & Ghahramani's UCI experiments,
``λ = l² (1 − p) / (2 N τ)``, added to the mean training loss as ``λ Σ ||W||²`` over the weight
matrices (not biases) of Linear/Conv layers, with ``p`` the dropout rate of the layers and
``N`` the training-set size (their Keras ``l2`` regulariser; its gradient is ``2 λ W``).

The constant-uncertainty baseline (CUDO, Teye et al.) is the base class's
:meth:`~bayesify.methods.core.base.Method.constant_baseline`: the same mean with a constant variance
fitted on validation data.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from bayesify.methods.core.base import Method, MethodConfig
from bayesify.nn.dropout import MCDropout as MCDropoutLayer
from bayesify.nn.dropout import convert_dropout

#: where ``dropout=p`` inserts new dropout layers: before every ``nn.Linear`` (Gal's
#: placement, inputs included), before every one but the first (hidden features only), or
#: before the last one only; "first" and "last" in registration order
WHERE = ("before-linear", "before-hidden-linear", "before-last-linear")


@dataclass(frozen=True)
class MCDropoutConfig(MethodConfig):
    """``p``: overrides every dropout layer's rate (None keeps the network's rates);
    ``dropout``: insert new dropout layers of this rate at ``where`` (for a network trained
    without dropout, e.g. via ``from_pretrained``; None inserts none);
    ``where``: before-linear | before-hidden-linear | before-last-linear;
    ``length_scale``: prior length-scale l for Gal's weight decay (None: no extra decay);
    ``tau``: model precision τ used in that weight decay."""

    p: float | None = None
    dropout: float | None = None
    where: str = "before-linear"
    length_scale: float | None = None
    tau: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dropout is not None and not 0.0 < self.dropout < 1.0:
            raise ValueError(f"dropout rate to insert must be in (0, 1), got {self.dropout}")
        if self.where not in WHERE:
            raise ValueError(f"unknown where {self.where!r}; valid: {', '.join(WHERE)}")
        if self.p is not None and not 0.0 <= self.p < 1.0:
            raise ValueError(f"dropout rate p must be in [0, 1), got {self.p}")
        if self.length_scale is not None and self.length_scale <= 0:
            raise ValueError(f"length_scale must be > 0, got {self.length_scale}")
        if self.tau <= 0:
            raise ValueError(f"tau must be > 0, got {self.tau}")


def gal_weight_decay(length_scale: float, p: float, n_data: int, tau: float) -> float:
    """Gal & Ghahramani's ``λ = l² (1 − p) / (2 N τ)``."""
    if n_data < 1:
        raise ValueError(f"n_data must be >= 1, got {n_data}")
    return length_scale**2 * (1.0 - p) / (2.0 * n_data * tau)


def insert_dropout(net: nn.Module, p: float, where: str) -> int:
    """Put ``nn.Dropout(p)`` in front of the ``nn.Linear`` layers of ``net`` that ``where``
    picks (see :data:`WHERE`): each becomes ``nn.Sequential(nn.Dropout(p), linear)``, so its
    weights move from key ``name.weight`` to ``name.1.weight``. Returns how many were inserted."""
    linears = [(parent, name, child)
               for parent in net.modules()
               for name, child in parent.named_children()
               if isinstance(child, nn.Linear)]  # fmt: skip
    if not linears:
        raise ValueError(
            f"dropout={p} inserts dropout before nn.Linear layers; the network has none"
        )
    chosen = {"before-linear": linears, "before-hidden-linear": linears[1:],
              "before-last-linear": linears[-1:]}[where]  # fmt: skip
    if not chosen:
        raise ValueError(f"where={where!r} picks no layer: the network has one nn.Linear")
    for parent, name, child in chosen:
        setattr(parent, name, nn.Sequential(nn.Dropout(p), child))
    return len(chosen)


class MCDropout(Method):
    """MC dropout: wraps any network with ``nn.Dropout``/``Dropout1d/2d/3d`` layers, or inserts
    them (``dropout=p``, ``where=...``), e.g. ``MCDropout.from_pretrained(net, val=(x, y),
    dropout=0.1, where="before-hidden-linear")`` for a network trained without dropout."""

    name = "mc-dropout"
    Config = MCDropoutConfig
    config: MCDropoutConfig

    def _prepare(self, net: nn.Module) -> None:
        if self.config.dropout is not None:
            insert_dropout(net, self.config.dropout, self.config.where)
        self.layers: list[MCDropoutLayer] = convert_dropout(net, self.config.p)

    @property
    def rate(self) -> float:
        """The dropout rate p (the mean over layers when they differ)."""
        return sum(m.p for m in self.layers) / len(self.layers)

    def weight_decay(self, n_data: int) -> float:
        """Gal's λ for ``n_data`` training rows, 0 without a length-scale."""
        if self.config.length_scale is None:
            return 0.0
        return gal_weight_decay(self.config.length_scale, self.rate, n_data, self.config.tau)

    def objective(self, x: Tensor, y: Tensor, progress: float, n_data: int) -> Tensor:
        loss = self.nll(self.net(x), y)
        lam = self.weight_decay(n_data)
        if lam > 0:
            weights = [
                m.weight
                for m in self.net.modules()
                if isinstance(m, nn.Linear | nn.Conv1d | nn.Conv2d | nn.Conv3d)
            ]
            loss = loss + lam * sum(w.square().sum() for w in weights)
        return loss
