"""The generalised Gauss-Newton (GGN) of the training log-likelihood for Laplace.

``H = Σ_n J_nᵀ Λ_n J_n`` with ``J_n`` the Jacobian of the network's outputs for row n with
respect to the weights and ``Λ_n`` the Hessian of the negative log-likelihood with respect to
those outputs (:func:`output_curvature`): ``diag(p) − p pᵀ`` for softmax cross-entropy, 1 for a
homoscedastic Gaussian (its 1/σ² is the posterior's ``scale``), and the Fisher information of
(mean, softplus variance) for the heteroscedastic Gaussian.

* Last layer (:func:`last_layer_curvature`): ``J_n = I ⊗ φ̃_n`` from the features φ_n the layer
  reads, so full, Kronecker-factored and diagonal GGNs are sums over rows in closed form.
* All layers (:func:`all_layer_curvature`): every ``nn.Linear`` and ``nn.Conv2d``; the diagonal
  from per-sample Jacobians (``torch.func``), KFAC from the layers' inputs and per-row output
  gradients of ``f_n · L_n[:, k]`` with ``Λ_n = L_n L_nᵀ`` (one backward per output k). Batch
  norm runs in eval mode (rows stay independent) and its scale and shift stay at their MAP
  values: they are not in the posterior.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.methods.core.likelihood import VARIANCE_FLOOR
from bayesify.nn.laplace_posterior import (
    DiagBlock,
    FullBlock,
    KronBlock,
    LaplaceBlock,
    LaplaceLinear,
)
from bayesify.nn.modes import eval_mode
from bayesify.options import Task

#: a layer in the posterior: all layers' ``nn.Linear`` and ``nn.Conv2d``, or the last layer's
#: :class:`LaplaceLinear`; its ``weight`` and ``bias`` are the posterior's mean
PosteriorLayer = nn.Linear | nn.Conv2d | LaplaceLinear
#: the mini-batches ``(x, y)`` a curvature is summed over (a DataLoader)
Batches = Iterable[tuple[Tensor, Tensor]]


@dataclass
class DataTerm:
    """What the marginal likelihood needs of the data besides ``H``: the number of rows, the
    log-likelihood at the MAP (classification, heteroscedastic regression) or the residual
    sum of squares (homoscedastic regression, whose σ² is fitted with the prior)."""

    n_data: int = 0
    log_likelihood: float = 0.0
    sse: float = 0.0


def output_curvature(out: Tensor, task: Task, heteroscedastic: bool) -> Tensor:
    """``L_n`` with ``Λ_n = L_n L_nᵀ`` for outputs ``out [N, C]``: ``[N, C, C]`` float64."""
    out = out.double()
    if task is Task.CLASSIFICATION:
        p = out.softmax(-1)
        sq = p.sqrt()
        return torch.diag_embed(sq) - p.unsqueeze(-1) * sq.unsqueeze(-2)
    if heteroscedastic:
        var = F.softplus(out[:, 1]) + VARIANCE_FLOOR
        dvar = torch.sigmoid(out[:, 1])
        diag = torch.stack([var.rsqrt(), dvar / (math.sqrt(2) * var)], -1)
        return torch.diag_embed(diag)
    return torch.ones(len(out), out.shape[-1], 1, dtype=torch.float64, device=out.device)


def data_term(out: Tensor, y: Tensor, task: Task, heteroscedastic: bool) -> DataTerm:
    """One batch's contribution to :class:`DataTerm`."""
    out = out.double()
    if task is Task.CLASSIFICATION:
        ll = -F.cross_entropy(out, y.long(), reduction="sum")
        return DataTerm(len(out), float(ll))
    if heteroscedastic:
        var = F.softplus(out[:, 1]) + VARIANCE_FLOOR
        nll = 0.5 * (math.log(2 * math.pi) + var.log() + (y.double() - out[:, 0]) ** 2 / var)
        return DataTerm(len(out), float(-nll.sum()))
    sse = (out.reshape(-1) - y.double().reshape(-1)).square().sum()
    return DataTerm(len(out), 0.0, float(sse))


def _add(a: DataTerm, b: DataTerm) -> DataTerm:
    return DataTerm(a.n_data + b.n_data, a.log_likelihood + b.log_likelihood, a.sse + b.sse)


def _batches(loader: Batches, device: torch.device) -> Iterator[tuple[Tensor, Tensor]]:
    for xb, yb in loader:
        yield xb.to(device), yb.to(device)


# ---------------------------------------------------------------------------- last layer
def last_layer_curvature(
    net: nn.Module,
    layer: nn.Module,
    block: LaplaceBlock,
    loader: Batches,
    task: Task,
    heteroscedastic: bool,
    device: torch.device,
) -> DataTerm:
    """Fill ``block`` with the GGN of ``layer`` (the network's last linear layer) over the
    batches of ``loader``; the features are its inputs, read by a hook in one eval pass per
    batch. Returns the data term."""
    feats: list[Tensor] = []
    handle = layer.register_forward_pre_hook(lambda _m, args: feats.append(args[0]))
    c, d, bias = block.out_features, block.in_features, block.has_bias
    f64 = torch.float64
    acc: dict[str, Tensor] = {}
    term = DataTerm()
    try:
        with eval_mode(net), torch.no_grad():
            for xb, yb in _batches(loader, device):
                feats.clear()
                out = net(xb)
                phi = feats[-1].reshape(-1, d).double()
                out = out.reshape(len(phi), -1)
                term = _add(term, data_term(out, yb, task, heteroscedastic))
                lam_sqrt = output_curvature(out, task, heteroscedastic)
                lam = lam_sqrt @ lam_sqrt.transpose(1, 2)  # [n, C, C]
                _accumulate(acc, block, phi, lam)
    finally:
        handle.remove()
    n = max(term.n_data, 1)
    zero = torch.zeros((), dtype=f64, device=device)
    if isinstance(block, FullBlock):
        ww, wb, bb = acc.get("ww", zero), acc.get("wb", zero), acc.get("bb", zero)
        h = ww.reshape(c * d, c * d)
        if bias:
            wb = wb.reshape(c * d, c)
            h = torch.cat([torch.cat([h, wb], 1), torch.cat([wb.T, bb], 1)], 0)
        block.set_curvature(h)
    elif isinstance(block, KronBlock):
        block.set_curvature(acc["g"], acc["a"] / n)
    elif isinstance(block, DiagBlock):
        block.set_curvature(acc["hw"], acc["hb"] if bias else None)
    return term


def _accumulate(acc: dict[str, Tensor], block: LaplaceBlock, phi: Tensor, lam: Tensor) -> None:
    def add(key: str, value: Tensor) -> None:
        acc[key] = acc[key] + value if key in acc else value

    if isinstance(block, FullBlock):
        add("ww", torch.einsum("nck,nd,ne->cdke", lam, phi, phi))
        add("wb", torch.einsum("nck,nd->cdk", lam, phi))
        add("bb", lam.sum(0))
    elif isinstance(block, KronBlock):
        add("g", lam.sum(0))
        add("a", phi.T @ phi)
    else:
        diag = lam.diagonal(dim1=1, dim2=2)  # [n, C]
        add("hw", diag.T @ phi.square())
        add("hb", diag.sum(0))


# ---------------------------------------------------------------------------- all layers
def posterior_layers(net: nn.Module) -> list[nn.Linear | nn.Conv2d]:
    """The layers an all-layer Laplace puts in its posterior: every ``nn.Linear`` and
    ``nn.Conv2d`` (other parameters, e.g. batch norm's, stay at their MAP values)."""
    return [m for m in net.modules() if isinstance(m, nn.Linear | nn.Conv2d)]


def layer_shape(layer: PosteriorLayer) -> tuple[int, int, bool]:
    """``(out, in, bias)`` of a layer's weight as a matrix (a convolution's ``in·k·k``)."""
    w = layer.weight
    return w.shape[0], int(w[0].numel()), layer.bias is not None


def _inputs_as_rows(layer: PosteriorLayer, x: Tensor) -> Tensor:
    """A layer's input as rows of its weight matrix's input: ``[rows, in]`` (a convolution's
    unfolded patches, one row per position)."""
    if isinstance(layer, nn.Conv2d):
        if isinstance(layer.padding, str):  # F.unfold takes numbers only
            raise TypeError(f"KFAC needs a Conv2d with numeric padding, got {layer.padding!r}")
        patches = F.unfold(x, layer.kernel_size, layer.dilation, layer.padding, layer.stride)
        return patches.transpose(1, 2).reshape(-1, patches.shape[1])
    return x.reshape(-1, x.shape[-1])


def _grads_as_rows(layer: PosteriorLayer, g: Tensor) -> Tensor:
    if isinstance(layer, nn.Conv2d):
        return g.flatten(2).transpose(1, 2).reshape(-1, g.shape[1])
    return g.reshape(-1, g.shape[-1])


def all_layer_curvature(
    net: nn.Module,
    blocks: Sequence[tuple[PosteriorLayer, LaplaceBlock]],
    loader: Batches,
    task: Task,
    heteroscedastic: bool,
    device: torch.device,
) -> DataTerm:
    """Fill every block (KFAC or diagonal) with its layer's GGN over ``loader``."""
    kron = isinstance(blocks[0][1], KronBlock)
    acc: dict[int, dict[str, Tensor]] = {i: {} for i in range(len(blocks))}
    term = DataTerm()
    n_rows = 0
    with eval_mode(net):
        for xb, yb in _batches(loader, device):
            with torch.no_grad():
                out = net(xb).reshape(len(xb), -1)
            term = _add(term, data_term(out, yb, task, heteroscedastic))
            lam_sqrt = output_curvature(out, task, heteroscedastic).to(out.dtype)
            if kron:
                _kfac_batch(net, blocks, xb, lam_sqrt, acc)
            else:
                _diag_batch(net, blocks, xb, lam_sqrt, acc)
            n_rows += len(xb)
    for i, (_layer, block) in enumerate(blocks):
        a = acc[i]
        if kron:
            assert isinstance(block, KronBlock)  # every block is of the first one's kind
            block.set_curvature(a["g"], a["a"] / max(n_rows, 1))
        else:
            assert isinstance(block, DiagBlock)  # all layers: kfac or diag (LaplaceConfig)
            block.set_curvature(a["hw"].reshape(block.out_features, -1), a.get("hb"))
    return term


def _kfac_batch(
    net: nn.Module,
    blocks: Sequence[tuple[PosteriorLayer, LaplaceBlock]],
    xb: Tensor,
    lam_sqrt: Tensor,
    acc: dict[int, dict[str, Tensor]],
) -> None:
    """KFAC factors of one batch: inputs by forward hooks, output gradients of
    ``Σ_n f_n · L_n[:, k]`` for each k by backward hooks (rows are independent in eval mode)."""
    inputs: dict[int, Tensor] = {}
    grads: dict[int, Tensor] = {}
    handles = []
    for i, (layer, _) in enumerate(blocks):

        def fwd(_m: nn.Module, args: tuple[Tensor, ...], output: Tensor, i: int = i) -> None:
            inputs[i] = args[0].detach()

            def save(g: Tensor) -> None:
                grads[i] = g.detach()

            output.register_hook(save)  # type: ignore[no-untyped-call]  # torch: no annotations

        handles.append(layer.register_forward_hook(fwd))
    try:
        with torch.enable_grad():
            xg = xb.detach().requires_grad_(False)
            out = net(xg).reshape(len(xb), -1)
            for i, (layer, _) in enumerate(blocks):
                rows = _inputs_as_rows(layer, inputs[i]).double()
                positions = rows.shape[0] // len(xb)
                a = rows.T @ rows / positions
                acc[i]["a"] = acc[i]["a"] + a if "a" in acc[i] else a
            k_out = lam_sqrt.shape[-1]
            for k in range(k_out):
                grads.clear()
                net.zero_grad(set_to_none=True)
                (out * lam_sqrt[:, :, k]).sum().backward(retain_graph=k < k_out - 1)
                for i, (layer, _) in enumerate(blocks):
                    g = _grads_as_rows(layer, grads[i]).double()
                    acc[i]["g"] = acc[i]["g"] + g.T @ g if "g" in acc[i] else g.T @ g
            net.zero_grad(set_to_none=True)
    finally:
        for h in handles:
            h.remove()


def _diag_batch(
    net: nn.Module,
    blocks: Sequence[tuple[PosteriorLayer, LaplaceBlock]],
    xb: Tensor,
    lam_sqrt: Tensor,
    acc: dict[int, dict[str, Tensor]],
) -> None:
    """Diagonal GGN of one batch: per-row Jacobians of ``f_n · L_n`` (torch.func)."""
    from torch.func import functional_call, jacrev, vmap

    names = {}
    for name, m in net.named_modules():
        names[id(m)] = name
    params = {}
    for layer, _ in blocks:
        prefix = names[id(layer)]
        params[f"{prefix}.weight"] = layer.weight.detach()
        if layer.bias is not None:
            params[f"{prefix}.bias"] = layer.bias.detach()
    state = {k: v.detach() for k, v in net.state_dict().items()}

    def f(p: dict[str, Tensor], x: Tensor, lsq: Tensor) -> Tensor:
        out: Tensor = functional_call(net, {**state, **p}, (x.unsqueeze(0),))
        return out.reshape(-1).to(lsq.dtype) @ lsq  # [K]

    jac = vmap(jacrev(f), in_dims=(None, 0, 0))(params, xb, lam_sqrt)  # name -> [n, K, *shape]
    for i, (layer, _) in enumerate(blocks):
        prefix = names[id(layer)]
        hw = jac[f"{prefix}.weight"].double().square().sum((0, 1))
        acc[i]["hw"] = acc[i]["hw"] + hw if "hw" in acc[i] else hw
        if layer.bias is not None:
            hb = jac[f"{prefix}.bias"].double().square().sum((0, 1))
            acc[i]["hb"] = acc[i]["hb"] + hb if "hb" in acc[i] else hb
