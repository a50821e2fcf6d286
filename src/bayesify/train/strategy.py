"""How :meth:`bayesify.methods.core.base.Method.fit` runs the one training loop: in which processes
and on which devices, over which rows, and how replicas agree.

A :class:`Strategy` runs a method's ``train_replica(replica)`` once per replica and leaves the
network with replica 0's trained state; a :class:`Replica` is one process's part: its device,
its share of the data (a loader and a per-epoch hook), the module the training forward goes
through, the check that all replicas train on the same rows and options, and how a score (the
validation loss of early stopping) is agreed on by all replicas. The default strategy trains one
replica in this process; :class:`bayesify.train.distributed.DDP` trains data-parallel replicas.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn
from torch.utils.data import DataLoader

from bayesify.train.loop import Data, History, as_loader, loader_batch_size


@dataclass(frozen=True)
class LoopOptions:
    """The training-loop options of one ``Method.fit`` call, handed to every replica."""

    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    optimizer: str
    patience: int | None
    seed: int
    progress: bool


class Trained(NamedTuple):
    """What one replica's training gives back: its history and its (unwrapped) network."""

    history: History
    net: nn.Module


class Replica:
    """One process's part of training; this one is the only replica, in this process."""

    rank: int = 0
    world: int = 1

    def device(self, device: torch.device) -> torch.device:
        """The device this replica trains on, given the network's."""
        return device

    def loader(
        self, train: Data, batch_size: int, seed: int
    ) -> tuple[DataLoader, Callable[[int], None] | None]:
        """This replica's training batches and a hook run before every epoch (or None)."""
        return as_loader(train, batch_size, shuffle=True, seed=seed), None

    def wrap(self, net: nn.Module) -> nn.Module:
        """The module the training forward and backward go through."""
        return net

    def unwrap(self, model: nn.Module) -> nn.Module:
        """The network inside what :meth:`wrap` returned."""
        return model

    def check_same(self, train: Data, val: Data | None, loop: LoopOptions) -> None:
        """Refuse when another replica would train on other rows or options (one line; every
        replica must call it before its first step). A lone replica has nothing to compare."""

    def agree(self, value: float) -> float:
        """Replica 0's ``value``, on every replica (each must call it at the same point): the
        score of the network that training keeps, so all replicas stop at the same epoch."""
        return value


class Strategy:
    """Train one replica in this process (the default of ``Method.fit``)."""

    #: whether torch batch-norm layers normalise with the statistics of the global batch
    sync_batch_norm: bool = False
    #: training processes
    replicas: int = 1

    def replica_batch_size(self, train: Data, batch_size: int) -> int:
        """The rows per step each replica trains with (what, e.g., MCBN's bank then uses): a
        DataLoader's own batch size, else ``batch_size``."""
        if isinstance(train, DataLoader):
            return loader_batch_size(train) or batch_size
        return batch_size

    def run(self, train_replica: Callable[[Replica], Trained], net: nn.Module) -> History:
        """Train every replica; ``net`` ends with replica 0's trained state. Returns replica
        0's history."""
        return train_replica(Replica()).history
