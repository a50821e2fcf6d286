"""A network's penultimate features: the inputs of its output layer."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bayesify.nn.modes import eval_mode


def _is_layer(m: nn.Module) -> bool:
    """A module with weights of its own: parameters, or the packed int8 weights of a
    dynamically quantised ``nn.Linear`` (``bayesify serve --int8``), which are not parameters."""
    if next(m.parameters(recurse=False), None) is not None:
        return True
    return isinstance(getattr(m, "_packed_params", None), nn.Module)


def output_layer(net: nn.Module, x: Tensor) -> nn.Module:
    """The last module with weights of its own that ``net``'s forward pass runs on ``x``
    (a few rows): its output layer, whatever its kind (``nn.Linear``, a Bayesian, sampled or
    int8-quantised linear layer). A ``ValueError`` when the pass runs none."""
    ran: list[nn.Module] = []
    hooks = [m.register_forward_pre_hook(lambda mod, _args: ran.append(mod))
             for m in net.modules() if _is_layer(m)]  # fmt: skip
    try:
        with eval_mode(net), torch.no_grad():
            net(x)
    finally:
        for h in hooks:
            h.remove()
    if not ran:
        raise ValueError("the network's forward pass runs no layer with parameters")
    return ran[-1]


def penultimate_features(net: nn.Module, x: Tensor, batch_size: int = 256) -> Tensor:
    """The inputs of ``net``'s output layer (:func:`output_layer`) at ``x [N, ...]``: ``[N, D]``,
    in eval mode outside any sampling block (the deterministic network), without gradients,
    ``batch_size`` rows per forward. A ``ValueError`` when that layer does not see one row of
    features per input row."""
    layer = output_layer(net, x[:2])
    seen: list[Tensor] = []
    hook = layer.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach()))
    try:
        with eval_mode(net), torch.no_grad():
            for a in range(0, len(x), batch_size):
                net(x[a : a + batch_size])
    finally:
        hook.remove()
    h = torch.cat(seen)
    if h.shape[0] != len(x):
        raise ValueError(f"the output layer ({type(layer).__name__}) saw {h.shape[0]} rows "
                         f"for {len(x)} inputs: not one feature row per input row")  # fmt: skip
    return h.reshape(len(x), -1)
