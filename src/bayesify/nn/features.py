"""A network's penultimate features: the inputs of its last ``nn.Linear`` layer."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bayesify.nn.modes import eval_mode
from bayesify.nn.sampled_linear import last_linear


def penultimate_features(net: nn.Module, x: Tensor, batch_size: int = 256) -> Tensor:
    """The inputs of ``net``'s last ``nn.Linear`` (registration order) at ``x [N, ...]``:
    ``[N, D]``, in eval mode outside any sampling block (the deterministic network), without
    gradients, ``batch_size`` rows per forward. A ``ValueError`` when the net has no
    ``nn.Linear`` or its last one does not see one row of features per input row."""
    _, _, layer = last_linear(net)
    seen: list[Tensor] = []
    hook = layer.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach()))
    try:
        with eval_mode(net), torch.no_grad():
            for a in range(0, len(x), batch_size):
                net(x[a : a + batch_size])
    finally:
        hook.remove()
    if not seen:
        raise ValueError("the network's last nn.Linear layer is not used by its forward pass")
    h = torch.cat(seen)
    if h.shape[0] != len(x):
        raise ValueError(f"the last nn.Linear layer saw {h.shape[0]} rows for {len(x)} inputs: "
                         "it does not take one feature row per input row")  # fmt: skip
    return h.reshape(len(x), -1)
