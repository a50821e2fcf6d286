"""BatchEnsemble (Wen, Tran & Ba, ICLR 2020): an ensemble at nearly the price of one network.

Every ``nn.Linear`` (and ``nn.Conv2d``) of the network becomes a
:class:`~bayesify.nn.batch_ensemble.BatchEnsembleLayer`: one shared weight W, and per member i
rank-1 fast weights ``r_i``, ``s_i`` and a bias ``b_i`` (member i's weight is ``W ∘ s_i r_iᵀ``).
The members' fast weights start at N(1, ``init_std``²) (``init="sign"``: random ±1), drawn
with ``init_seed``, so the members differ from the first step. They train at ``fast_lr`` (0.5)
times ``fit``'s learning rate and without weight decay, as in the authors' code; the slower
rate keeps the members further apart (``benchmarks/uci_batch_ensemble_init.md``).

Training: each mini-batch is repeated M times in one pass, member m seeing copy m
(``member_batch="repeat"``, the default), or cut into M parts, one per member (``"split"``);
the loss is the mean over all rows, so every member's term weighs the same.

Prediction: the member axis is the sample axis, and T = M whatever T is asked for
(:class:`~bayesify.methods.core.members.MembersInOnePass`, as Packed-Ensembles: the members are
deterministic, so their mixture is exact with M samples); the M members run in one pass over
``M*N`` rows. Outside a sampling block (``method.net(x)``, the
validation loss behind early stopping) every row runs member 0.

``from_pretrained(net, train, ...)``: W and the member biases start from the trained weights and
biases, the fast weights around 1 as above, then all of them are fine-tuned on ``train`` for
``epochs`` (10) epochs at ``lr``; ``epochs=0`` keeps the weights (the members are then random
rank-1 perturbations of the trained network).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from bayesify.methods.core.base import MethodConfig
from bayesify.methods.core.members import MembersInOnePass
from bayesify.nn import sampling
from bayesify.nn.batch_ensemble import BatchEnsembleLayer, convert_layers
from bayesify.options import FastWeightInit, MemberBatch
from bayesify.train import Data


@dataclass(frozen=True)
class BatchEnsembleConfig(MethodConfig):
    """``members``: M; ``init``: how the fast weights start (normal: N(1, init_std²); sign:
    random ±1); ``init_std``: their spread around 1; ``init_seed``: the seed of their draw;
    ``member_batch``: repeat (every member sees the whole mini-batch) or split (each one M-th
    of it); ``fast_lr``: the fast weights' learning rate as a multiple of ``fit``'s ``lr``
    (0: they keep their initial draw); ``conv``: also convert ``nn.Conv2d`` layers (else
    ``nn.Linear`` only)."""

    members: int = 4
    init: FastWeightInit = FastWeightInit.NORMAL
    init_std: float = 0.5
    init_seed: int = 0
    member_batch: MemberBatch = MemberBatch.REPEAT
    fast_lr: float = 0.5
    conv: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(("members",), lambda v: v >= 1, ">= 1")
        self._require(("init_std", "fast_lr"), lambda v: v >= 0, ">= 0")


class BatchEnsemble(MembersInOnePass):
    """BatchEnsemble: M members sharing every layer's weight W, each with its own rank-1 fast
    weights, trained together and predicted in one pass (the members are the samples, T = M)."""

    name = "batch-ensemble"
    Config = BatchEnsembleConfig
    config: BatchEnsembleConfig
    spread_hint = (
        "use init='sign' (±1 fast weights; slower first epochs), lower fast_lr (e.g. 0.1: "
        "they then stay nearer their distinct start), raise init_std, or train with "
        "member_batch='split' (benchmarks/uci_batch_ensemble_init.md weighs each)"
    )

    def _prepare(self, net: nn.Module) -> None:
        cfg = self.config
        self.layers: list[BatchEnsembleLayer] = convert_layers(net, cfg.members, cfg.conv)
        generator = torch.Generator().manual_seed(cfg.init_seed)
        for layer in self.layers:
            layer.init_fast_weights(cfg.init, cfg.init_std, generator)

    def param_groups(self, lr: float, weight_decay: float) -> list[dict[str, Any]]:
        """The fast weights ``r``, ``s`` at ``lr * fast_lr`` without weight decay (the authors'
        code spares them its L2); every other parameter at ``lr`` with ``weight_decay``."""
        fast = [p for layer in self.layers for p in (layer.r, layer.s)]
        return self._own_and_rest(fast, weight_decay, lr=lr * self.config.fast_lr)

    def objective(self, x: Tensor, y: Tensor, progress: float, n_data: int) -> Tensor:
        """The mean data term of the M members on the mini-batch: repeated to ``[M*B, ...]``
        (or split into M parts of ``B // M`` rows), group m run by member m, in one pass."""
        m = self.members
        if self.config.member_batch is MemberBatch.SPLIT and len(x) >= m:
            k = len(x) // m
            x, y = x[: k * m], y[: k * m]
        else:
            x = x.repeat(m, *(1,) * (x.dim() - 1))
            y = y.repeat(m, *(1,) * (y.dim() - 1))
        with sampling(self.net, m):
            out = self.net(x)
        return self.nll(out, y)

    def _forward_rows(self) -> int:
        """A forward runs each row once per member: a chunk of n rows is ``[M*n, ...]``."""
        return self.members

    def _members_block(self, generator: torch.Generator | None) -> AbstractContextManager[None]:
        """The M members as the M sample groups of the BatchEnsemble layers."""
        return self.sampling(self.members, generator)

    def _members_forward(self, chunk: Tensor) -> Tensor:
        """``chunk [n, ...]`` repeated to ``[M*n, ...]`` (group m run by member m) in one
        forward: ``[M, n, ...]``."""
        m = self.members
        y: Tensor = self.net(chunk.repeat(m, *(1,) * (chunk.dim() - 1)))
        return y.reshape(m, len(chunk), *y.shape[1:])

    def _from_pretrained(
        self,
        train: Data | None,
        val: Data | None,
        *,
        batch_size: int | None,
        seed: int,
        progress: bool,
        epochs: int = 10,
        lr: float = 1e-3,
    ) -> None:
        """Fine-tune W, the fast weights and the biases on ``train`` for ``epochs`` epochs at
        ``lr`` (``epochs=0``: keep them); τ on ``val``."""
        super()._from_pretrained(
            train, val, batch_size=batch_size, seed=seed, progress=progress, epochs=epochs, lr=lr
        )
