"""Data-parallel training with PyTorch's own stack (``torch.distributed`` + DDP).

:func:`fit_distributed` trains a method with ``nproc`` replicas (gloo on CPU, NCCL on GPU) through
the one training loop (:func:`bayesify.train.train_loop`), over loopback only: the processes are
spawned with ``torch.multiprocessing`` and meet through a file in a temporary folder. Launched by
``torchrun`` instead (``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` set), it joins that group.

Semantics, explicitly:

* ``batch_size`` is the **global** batch; each replica sees ``batch_size / nproc`` rows per step
  (a ``DistributedSampler``: replica r takes every nproc-th index of one shared permutation, so
  a step's global batch is the same block of rows a single process with ``batch_size`` sees).
  Gradients are averaged over replicas, so for mean losses a step equals the single-process step.
* Batch norm uses **per-replica** batch statistics by default (``batch_norm="replica"``; running
  statistics follow replica 0, DDP's buffer broadcast). ``batch_norm="sync"`` converts torch
  batch-norm layers to ``SyncBatchNorm`` (statistics over the global batch; CUDA only in torch).
* MCBN's statistics bank is filled afterwards with mini-batches of the **per-replica** batch size,
  the batch size whose statistics the network was trained to see. (MCBN's own batch-norm layers
  are not torch ``BatchNorm``; ``"sync"`` is refused for them.)
* Noise drawn during training (dropout masks, weight and node noise) is seeded per replica
  (``seed + rank``), so replicas draw independent noise.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from bayesify.io import read_bundle, write_bundle
from bayesify.methods.base import Method
from bayesify.nn import MCBatchNorm
from bayesify.options import BatchNormMode, parse_option
from bayesify.predictive import Task
from bayesify.train import Data, History, as_dataset, make_optimizer, train_loop

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistributedSettings:
    """Training options of one data-parallel run (``batch_size`` is the global batch)."""

    nproc: int = 2
    epochs: int = 100
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.0
    optimizer: str = "adam"
    patience: int | None = None
    seed: int = 0
    device: str = "cpu"
    backend: str | None = None  # default: gloo on CPU, nccl on CUDA
    batch_norm: BatchNormMode = BatchNormMode.REPLICA
    timeout_s: float = 300.0
    progress: bool = False

    def __post_init__(self) -> None:
        mode = parse_option(BatchNormMode, self.batch_norm, option="batch_norm")
        object.__setattr__(self, "batch_norm", mode)
        if self.nproc < 1:
            raise ValueError(f"nproc must be >= 1, got {self.nproc}")
        if self.batch_size % self.nproc:
            raise ValueError(
                f"the global batch size {self.batch_size} must split evenly over "
                f"{self.nproc} processes"
            )
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")

    @property
    def replica_batch_size(self) -> int:
        return self.batch_size // self.nproc

    @property
    def backend_name(self) -> str:
        return self.backend or ("nccl" if self.device.startswith("cuda") else "gloo")


class _Replica(DistributedDataParallel):
    """DDP whose unknown attributes fall through to the wrapped network, so method code such as
    ``getattr(self.net, "bbb_log_noise")`` works while ``method.net`` is the DDP wrapper."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)


def launched_by_torchrun() -> bool:
    """Whether this process is one of a ``torchrun`` group (its env:// variables are set)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def _check_batch_norm(method: Method, s: DistributedSettings) -> None:
    has_mcbn = any(isinstance(m, MCBatchNorm) for m in method.net.modules())
    if s.batch_norm is BatchNormMode.SYNC:
        if has_mcbn:
            raise ValueError(
                "batch_norm='sync' is not available for MCBN: its posterior is defined by the "
                "statistics of per-replica mini-batches; use batch_norm='replica'"
            )
        if not s.device.startswith("cuda"):
            raise ValueError("batch_norm='sync' needs CUDA (torch's SyncBatchNorm is GPU-only)")
    if has_mcbn and s.replica_batch_size < 2:
        raise ValueError(
            f"MCBN needs at least 2 rows per replica batch, got {s.replica_batch_size} "
            f"(global batch {s.batch_size} over {s.nproc} processes)"
        )


def _device(s: DistributedSettings, rank: int) -> torch.device:
    dev = torch.device(s.device)
    if dev.type == "cuda" and dev.index is None:
        return torch.device("cuda", rank % torch.cuda.device_count())
    return dev


def train_replica(
    method: Method, ds: Dataset, val: Data | None, s: DistributedSettings, rank: int, world: int
) -> History:
    """Train ``method`` as replica ``rank`` of ``world`` through the one training loop (inside
    an initialised process group when ``world > 1``). Returns the training history."""
    dev = _device(s, rank)
    net = method.net.to(dev)
    if s.batch_norm is BatchNormMode.SYNC:
        net = nn.SyncBatchNorm.convert_sync_batchnorm(net)
        method.net = net
    sampler = DistributedSampler(
        ds, num_replicas=world, rank=rank, shuffle=True, seed=s.seed, drop_last=True
    )
    loader = DataLoader(ds, batch_size=s.replica_batch_size, sampler=sampler, drop_last=True)
    if len(loader) == 0:
        raise ValueError(f"{len(ds)} training rows are fewer than one global batch")
    n_data = len(ds)
    opt = make_optimizer(method.param_groups(s.lr, s.weight_decay), s.optimizer, s.lr)
    validate = None
    if val is not None:
        xv, yv = (t.to(dev) for t in method._tensors(val))

        def validate() -> float:
            score = torch.tensor([float(method.nll(net(xv), yv))], device=dev)
            if world > 1:  # every replica must take the same early-stopping decision
                dist.all_reduce(score)
            return float(score) / world

    model: nn.Module = net
    if world > 1:
        model = _Replica(net, device_ids=[dev.index] if dev.type == "cuda" else None)
    torch.manual_seed(s.seed + rank)
    method.net = model
    try:
        return train_loop(
            model,
            lambda x, y, p: method.objective(x, y, p, n_data),
            loader,
            opt,
            epochs=s.epochs,
            validate=validate,
            patience=s.patience,
            after_step=method.after_step,
            device=dev,
            progress=s.progress and rank == 0,
            desc=f"{method.name} train ×{world}",
            on_epoch=sampler.set_epoch,
        )
    finally:
        method.net = net


def _worker(
    rank: int,
    world: int,
    init_method: str,
    method: Method,
    ds: Dataset,
    val: Data | None,
    s: DistributedSettings,
    out: str,
) -> None:
    """(In a spawned process.) Join the group, train one replica; replica 0 writes the weights
    and history as a bundle folder in ``out``."""
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    # torch.multiprocessing hands CPU tensors over in shared memory: without a private copy
    # every replica would step the same parameters in place
    method = copy.deepcopy(method)
    dist.init_process_group(
        s.backend_name,
        init_method=init_method,
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=s.timeout_s),
    )
    try:
        history = train_replica(method, ds, val, s, rank, world)
        if rank == 0:
            write_bundle(out, method.net.state_dict(), {"history": asdict(history)})
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _finish(method: Method, ds: Dataset, val: Data | None, s: DistributedSettings) -> None:
    """After training: the method's post-fit step with the per-replica batch size (MCBN's bank),
    then τ on validation data for regression, as :meth:`Method.fit` does."""
    method.net.eval()
    with torch.random.fork_rng():
        torch.manual_seed(s.seed)
        method._after_fit(ds, s.replica_batch_size, s.seed)
    if val is not None and method.config.task is Task.REGRESSION:
        method.fit_noise(val, seed=s.seed)


def fit_distributed(
    method: Method, train: Data, val: Data | None = None, **settings: Any
) -> Method:
    """Train ``method`` data-parallel on ``train``; keyword ``settings`` are the fields of
    :class:`DistributedSettings` (``nproc``, ``epochs``, global ``batch_size``, ``lr``, ...).

    Returns ``method`` with the weights of replica 0 (all replicas hold the same weights; their
    running batch-norm statistics are replica 0's).
    """
    s = DistributedSettings(**settings)
    ds = as_dataset(train)
    method._remember_input_shape(ds)
    _check_batch_norm(method, s)
    if launched_by_torchrun():
        return _fit_torchrun(method, ds, val, s)
    if s.nproc == 1:
        method.history = train_replica(method, ds, val, s, 0, 1)
        _finish(method, ds, val, s)
        return method
    log.info("training %s on %d processes (%s)", method.name, s.nproc, s.backend_name)
    with tempfile.TemporaryDirectory(prefix="bayesify-ddp-") as tmp:
        # the processes meet through a file, not a probed port that another program could take
        # between the probe and the bind
        init_method = (Path(tmp) / "rendezvous").as_uri()
        out = str(Path(tmp) / "replica0")
        torch.multiprocessing.spawn(
            _worker, args=(s.nproc, init_method, method, ds, val, s, out), nprocs=s.nproc
        )
        tensors, cfg = read_bundle(out)
    method.net.load_state_dict(tensors)
    method.history = History(**cfg["history"])
    _finish(method, ds, val, s)
    return method


def _fit_torchrun(method: Method, ds: Dataset, val: Data | None, s: DistributedSettings) -> Method:
    """Inside a ``torchrun`` group: train this replica, then give every process replica 0's
    state (buffers differ per replica) so all continue with the same method."""
    world = int(os.environ["WORLD_SIZE"])
    if world != s.nproc:
        log.warning("torchrun's WORLD_SIZE=%d overrides nproc=%d", world, s.nproc)
        s = DistributedSettings(**{**asdict(s), "nproc": world})
    rank = int(os.environ["RANK"])
    own_group = not dist.is_initialized()
    if own_group:
        dist.init_process_group(s.backend_name, init_method="env://",
                                timeout=timedelta(seconds=s.timeout_s))  # fmt: skip
    try:
        method.history = train_replica(method, ds, val, s, rank, world)
        for t in method.net.state_dict().values():
            dist.broadcast(t, src=0)
    finally:
        if own_group:
            dist.destroy_process_group()
    _finish(method, ds, val, s)
    log.info("replica %d done: %s", rank, json.dumps(asdict(method.history))[:200])
    return method
