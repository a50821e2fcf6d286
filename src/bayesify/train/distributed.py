"""Data-parallel training with PyTorch's own stack (``torch.distributed`` + DDP), as a
:class:`~bayesify.train.strategy.Strategy` of the one training loop:
``method.fit(train, val, batch_size=64, strategy=DDP(nproc=2))``.

Two ways to run it:

* **One machine.** :class:`DDP` spawns ``nproc`` replicas (gloo on CPU, NCCL on GPU) with
  ``torch.multiprocessing``; they meet through a file in a temporary folder (loopback only).
* **Several machines.** The same script (or ``bayesify train``) started by ``torchrun`` on every
  node (``--nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT``):
  each process finds ``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` set and joins torchrun's group of
  ``WORLD_SIZE`` replicas (``nproc`` is then ignored; ``LOCAL_RANK`` picks the GPU). The group
  is joined once per process and kept for later fits; it is left at exit, once every rank has
  reached the exit barrier (bounded by ``timeout_s``), or at once when a fit fails on some
  ranks only, so their peers fail on the closed connection, not at the timeout. Every process
  runs the whole of ``fit`` and ends with the same fitted method (replica 0's weights, MCBN bank
  and τ), so code after ``fit`` may run everywhere; only :func:`is_main_process` (rank 0) should
  write files or print.

Semantics, explicitly (both ways):

* ``batch_size`` is the **global** batch; each replica sees ``batch_size / replicas`` rows per
  step (a ``DistributedSampler``: replica r takes every replicas-th index of one permutation
  drawn from ``seed + epoch``, so a step's global batch is the same block of rows a single
  process with ``batch_size`` sees). Gradients are averaged over replicas, so for mean losses a
  step equals the single-process step.
* Before the first step the replicas compare their training and validation rows (count and an
  order-sensitive float64 checksum) and loop options (epochs, global batch, lr, weight decay,
  patience, seed) with replica 0's and all refuse, with one line naming what differs, if any
  replica's do not match (nodes that read different files or got different flags).
* Batch norm uses **per-replica** batch statistics by default (``batch_norm="replica"``; running
  statistics follow replica 0, DDP's buffer broadcast). ``batch_norm="sync"`` converts torch
  batch-norm layers to ``SyncBatchNorm`` (statistics over the global batch; CUDA only in torch).
* The method's post-fit step gets the **per-replica** batch size. MCBN fills its statistics bank
  with mini-batches of that size, the batch size whose statistics the network was trained to
  see; every process fills it from the whole training set with the same seed after receiving
  replica 0's weights, so the banks are identical and nothing is gathered across nodes (a
  bank row is one replica-sized batch's statistics, never a node's or the global batch's).
  ``"sync"`` is refused for MCBN, whose batch-norm layers are not torch ``BatchNorm``.
* Noise drawn during training (dropout masks, weight and node noise) is seeded per replica
  (``seed + rank``, the global rank), so replicas draw independent noise.
* Early stopping uses replica 0's validation score (the network that training keeps), sent to
  every replica, so all stop at the same epoch. Each replica's history holds its own training
  losses and these shared validation scores.
"""

from __future__ import annotations

import atexit
import copy
import gc
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.multiprocessing.spawn import ProcessException
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from bayesify.io import read_bundle, write_bundle
from bayesify.options import BatchNormMode, parse_option
from bayesify.train.fingerprint import run_fingerprint
from bayesify.train.loop import Data, History, as_dataset
from bayesify.train.replica_errors import ReplicasDiffer, replica_error
from bayesify.train.strategy import LoopOptions, Replica, Strategy, Trained

log = logging.getLogger(__name__)


def launched_by_torchrun() -> bool:
    """Whether this process is one of a ``torchrun`` group (its env:// variables are set)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def is_main_process() -> bool:
    """Whether this process should write files and print: rank 0 of a ``torchrun`` group, or a
    process outside one."""
    return not launched_by_torchrun() or int(os.environ["RANK"]) == 0


def torchrun_world() -> int | None:
    """The number of processes of this process's ``torchrun`` group (None outside one)."""
    return int(os.environ["WORLD_SIZE"]) if launched_by_torchrun() else None


@dataclass(frozen=True)
class DDP(Strategy):
    """``nproc`` data-parallel replicas of the training loop (see the module doc)."""

    nproc: int = 2
    backend: str | None = None  # default: gloo on CPU, nccl on CUDA
    batch_norm: BatchNormMode = BatchNormMode.REPLICA
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        mode = parse_option(BatchNormMode, self.batch_norm, option="batch_norm")
        object.__setattr__(self, "batch_norm", mode)
        if self.nproc < 1:
            raise ValueError(f"nproc must be >= 1, got {self.nproc}")

    @property
    def sync_batch_norm(self) -> bool:  # type: ignore[override]
        return self.batch_norm is BatchNormMode.SYNC

    @property
    def replicas(self) -> int:  # type: ignore[override]
        """``nproc``, or the size of the ``torchrun`` group this process belongs to."""
        return torchrun_world() or self.nproc

    def replica_batch_size(self, train: Data, batch_size: int) -> int:
        """``batch_size`` is the global batch; each replica takes ``batch_size / replicas``."""
        if batch_size % self.replicas:
            raise ValueError(f"the global batch size {batch_size} must split evenly over "
                             f"{self.replicas} processes")  # fmt: skip
        return batch_size // self.replicas

    def _backend(self, device: torch.device) -> str:
        return self.backend or ("nccl" if device.type == "cuda" else "gloo")

    def run(self, train_replica: Callable[[Replica], Trained], net: nn.Module) -> History:
        device = next(net.parameters(), torch.empty(0)).device
        if self.sync_batch_norm and device.type != "cuda":
            raise ValueError("batch_norm='sync' needs CUDA (torch's SyncBatchNorm is GPU-only)")
        if launched_by_torchrun():
            return self._run_torchrun(train_replica, device)
        if self.nproc == 1:
            return train_replica(_DDPReplica(self, 0, 1)).history
        log.info("training on %d processes (%s)", self.nproc, self._backend(device))
        with tempfile.TemporaryDirectory(prefix="bayesify-ddp-") as tmp:
            # the processes meet through a file, not a probed port that another program could
            # take between the probe and the bind
            init_method = (Path(tmp) / "rendezvous").as_uri()
            out = str(Path(tmp) / "replica0")
            try:
                torch.multiprocessing.spawn(
                    _worker, args=(self, train_replica, init_method, device, out),
                    nprocs=self.nproc,
                )  # fmt: skip
            except ProcessException as e:
                raise replica_error(e) from None
            tensors, cfg = read_bundle(out)
        net.load_state_dict(tensors)
        return History(**cfg["history"])

    def _run_torchrun(
        self, train_replica: Callable[[Replica], Trained], device: torch.device
    ) -> History:
        """Inside a ``torchrun`` group: train this replica, then give every process replica 0's
        state (buffers differ per replica) so all continue with the same network."""
        world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
        if world != self.nproc:
            log.info("torchrun's WORLD_SIZE=%d replaces nproc=%d", world, self.nproc)
        if _group_state["broken"]:
            raise RuntimeError("this process left torchrun's group after a failed fit; start "
                               "every node again to train once more")  # fmt: skip
        if not dist.is_initialized():
            # joined once and kept: a second group in the same process would meet in torchrun's
            # store under the first one's keys
            dist.init_process_group(self._backend(device), init_method="env://",
                                    timeout=timedelta(seconds=self.timeout_s))  # fmt: skip
            atexit.register(_leave_group)
        try:
            trained = train_replica(_DDPReplica(self, rank, world))
            for t in trained.net.state_dict().values():
                dist.broadcast(t, src=0)
        except ReplicasDiffer:
            raise  # raised by every replica at the same check: the group is still in step
        except BaseException:
            # this replica stops between collectives its peers are waiting in: leave the group
            # now, so they fail at once on the closed connection instead of at the timeout
            _group_state["broken"] = True
            _leave_group()
            raise
        return trained.history


#: "broken": this process left torchrun's group after a fit that stopped out of step
_group_state = {"broken": False}


def _leave_group() -> None:
    """Leave torchrun's group (at exit, or at once after a failed fit) while the interpreter is
    whole: DDP wrappers that a reference cycle kept are collected first, so the gloo group and
    its worker threads are freed and joined here and not in interpreter teardown (a thread
    there that reaches for the GIL aborts the process: "terminate called without an active
    exception"); on a group still in step every rank first meets at a barrier, so none closes
    its connections while a peer still reads the last collective's bytes."""
    if not dist.is_initialized():
        return
    gc.collect()
    if not _group_state["broken"]:
        try:
            dist.barrier()  # bounded by the group's timeout
        except Exception as e:  # a peer already gone: nothing left to wait for
            log.warning("leaving torchrun's group without its peers: %s",
                        str(e).splitlines()[0] if str(e) else type(e).__name__)  # fmt: skip
    dist.destroy_process_group()
    gc.collect()


class _DDPReplica(Replica):
    """Replica ``rank`` of ``world`` (inside an initialised process group when world > 1)."""

    def __init__(self, strategy: DDP, rank: int, world: int) -> None:
        self.strategy, self.rank, self.world = strategy, rank, world
        self._device = torch.device("cpu")

    def device(self, device: torch.device) -> torch.device:
        if device.type == "cuda" and device.index is None:
            local = int(os.environ.get("LOCAL_RANK", self.rank))  # torchrun: rank on this node
            device = torch.device("cuda", local % torch.cuda.device_count())
        self._device = device
        return device

    def loader(
        self, train: Data, batch_size: int, seed: int
    ) -> tuple[DataLoader, Callable[[int], None]]:
        ds = as_dataset(train)
        sampler = DistributedSampler(
            ds, num_replicas=self.world, rank=self.rank, shuffle=True, seed=seed, drop_last=True
        )
        per_replica = self.strategy.replica_batch_size(train, batch_size)
        # a generator of its own: an iterator over a loader without one draws its base seed from
        # torch's global stream, which would shift the replica's dropout masks every epoch
        gen = torch.Generator().manual_seed(seed)
        loader = DataLoader(ds, batch_size=per_replica, sampler=sampler, drop_last=True,
                            generator=gen)  # fmt: skip
        if len(loader) == 0:
            raise ValueError(f"{len(ds)} training rows are fewer than one global batch")
        return loader, sampler.set_epoch

    def wrap(self, net: nn.Module) -> nn.Module:
        if self.strategy.sync_batch_norm:
            net = nn.SyncBatchNorm.convert_sync_batchnorm(net)
        if self.world == 1:
            return net
        dev = next(net.parameters()).device
        return DistributedDataParallel(net, device_ids=[dev.index] if dev.type == "cuda" else None)

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model.module if isinstance(model, DistributedDataParallel) else model

    def agree(self, value: float) -> float:
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self._device)
        dist.broadcast(t, src=0)
        return float(t)

    def check_same(self, train: Data, val: Data | None, loop: LoopOptions) -> None:
        """Refuse on every replica when any replica's rows or loop options differ from replica
        0's (gathered, so all replicas raise the same error instead of waiting forever)."""
        if self.world == 1:
            return
        mine = run_fingerprint(train, val, loop)
        t = torch.tensor(list(mine.values()), dtype=torch.float64, device=self._device)
        every = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(every, t)
        first = every[0]
        for r, other in enumerate(every[1:], start=1):
            close = torch.isclose(other, first, rtol=1e-9, atol=0) | (other.isnan() & first.isnan())
            if not close.all():
                names = ", ".join(k for k, ok in zip(mine, close.tolist(), strict=True) if not ok)
                raise ReplicasDiffer(
                    f"replica {r} differs from replica 0 in {names}: every node must run the same "
                    "command on the same data"
                )


def _worker(
    rank: int,
    strategy: DDP,
    train_replica: Callable[[Replica], Trained],
    init_method: str,
    device: torch.device,
    out: str,
) -> None:
    """(In a spawned process.) Join the group, train one replica; replica 0 writes the weights
    and history as a bundle folder in ``out``."""
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // strategy.nproc))
    # torch.multiprocessing hands CPU tensors over in shared memory: without a private copy
    # every replica would step the same parameters in place
    train_replica = copy.deepcopy(train_replica)
    dist.init_process_group(
        strategy._backend(device),
        init_method=init_method,
        rank=rank,
        world_size=strategy.nproc,
        timeout=timedelta(seconds=strategy.timeout_s),
    )
    try:
        trained = train_replica(_DDPReplica(strategy, rank, strategy.nproc))
        if rank == 0:
            write_bundle(out, trained.net.state_dict(), {"history": asdict(trained.history)})
        dist.barrier()
    finally:
        dist.destroy_process_group()


@dataclass(frozen=True)
class DistributedSettings:
    """Training options of one data-parallel run (``batch_size`` is the global batch): the
    options of ``Method.fit`` plus those of :class:`DDP`."""

    nproc: int = 2
    epochs: int = 100
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.0
    optimizer: str = "adam"
    patience: int | None = None
    seed: int = 0
    device: str = "cpu"
    backend: str | None = None
    batch_norm: BatchNormMode = BatchNormMode.REPLICA
    timeout_s: float = 300.0
    progress: bool = False

    def __post_init__(self) -> None:
        strategy = self.strategy()  # checks nproc and batch_norm
        object.__setattr__(self, "batch_norm", strategy.batch_norm)
        strategy.replica_batch_size(None, self.batch_size)  # checks the split
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")

    def strategy(self) -> DDP:
        return DDP(self.nproc, self.backend, self.batch_norm, self.timeout_s)

    @property
    def replica_batch_size(self) -> int:
        """Rows per step of each replica (torchrun's group size replaces ``nproc`` under it)."""
        return self.strategy().replica_batch_size(None, self.batch_size)


class _Fits(Protocol):
    """What :func:`fit_distributed` needs of a method (``bayesify.methods.Method``'s ``fit``;
    named structurally because methods sit above this layer)."""

    def fit(self, train: Data, val: Data | None = None, **options: Any) -> Any: ...


def fit_distributed(method: _Fits, train: Data, val: Data | None = None, **settings: Any) -> Any:
    """``method.fit(train, val, ..., strategy=DDP(...))`` with keyword ``settings`` the fields of
    :class:`DistributedSettings` (``nproc``, ``epochs``, global ``batch_size``, ``lr``, ...).

    Returns ``method`` with the weights of replica 0 (all replicas hold the same weights; their
    running batch-norm statistics are replica 0's).
    """
    s = DistributedSettings(**settings)
    return method.fit(
        train,
        val,
        epochs=s.epochs,
        batch_size=s.batch_size,
        lr=s.lr,
        weight_decay=s.weight_decay,
        optimizer=s.optimizer,
        patience=s.patience,
        seed=s.seed,
        device=s.device,
        progress=s.progress,
        strategy=s.strategy(),
    )
