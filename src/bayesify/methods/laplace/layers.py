"""All-layer Laplace's draws and forward passes: weight deviations ``θ − θ*`` per layer drawn from
each layer's block, and the network's outputs under them, linearised (GLM, forward-mode) or at
the drawn weights (sampled); behind :class:`~bayesify.methods.laplace.laplace.Laplace`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from bayesify.methods.laplace.curvature import PosteriorLayer
from bayesify.nn.laplace_posterior import LaplaceBlock
from bayesify.nn.modes import eval_mode
from bayesify.options import LaplacePredictive


def all_layer_deltas(
    net: nn.Module,
    blocks: Sequence[tuple[PosteriorLayer, LaplaceBlock]],
    samples: int,
    generator: torch.Generator | None,
) -> dict[str, Tensor]:
    """Per weight tensor name, T draws of ``θ − θ*`` ``[T, *shape]`` (network dtype)."""
    names = {id(m): name for name, m in net.named_modules()}
    out: dict[str, Tensor] = {}
    for layer, block in blocks:
        dw, db = block.deltas(samples, generator)
        prefix = names[id(layer)]
        w = layer.weight
        out[f"{prefix}.weight"] = dw.reshape(samples, *w.shape).to(w)
        if layer.bias is not None:
            out[f"{prefix}.bias"] = db.to(layer.bias)
    return out


def all_layer_forward(
    net: nn.Module, x: Tensor, deltas: dict[str, Tensor], predictive: LaplacePredictive
) -> Tensor:
    """``[G, n, ...]`` outputs for the G draws in ``deltas``: the linearised network (GLM,
    forward-mode) or the network at the drawn weights (sampled)."""
    from torch.func import functional_call, jvp, vmap

    state = {k: v.detach() for k, v in net.state_dict().items()}
    params = {k: state[k] for k in deltas}

    def f(p: dict[str, Tensor]) -> Tensor:
        out: Tensor = functional_call(net, {**state, **p}, (x,))
        return out

    with eval_mode(net), torch.no_grad():
        if predictive is LaplacePredictive.SAMPLED:
            drawn: Tensor = vmap(lambda d: f({k: params[k] + d[k] for k in d}))(deltas)
            return drawn

        # jvp's primal does not depend on the draw: one forward pass gives f(x) and each J(x)Δ_t
        def linearised(d: dict[str, Tensor]) -> Any:
            return jvp(f, (params,), (d,))

        primal_once: Any = (None, 0)  # torch's stubs omit None inside out_dims
        mean, lin = vmap(linearised, out_dims=primal_once)(deltas)
        out: Tensor = mean.unsqueeze(0) + lin
        return out
