"""What ``bayesify bench speed`` measures: the networks, the methods on them, the three ways to
draw T samples (one pass, the loop of T passes, Teye et al.'s Algorithm 1), and peak memory.

Networks (random weights: timing does not depend on training):

* ``mlp``: Teye et al.'s UCI regression net, 8 inputs, two hidden layers of 50;
* ``lenet``: the LeNet-style CNN on ``[1, 28, 28]`` images, 10 classes;
* ``resnet``: the small ResNet-8 (width 16) on ``[1, 28, 28]`` images.

Each method gets the variant of the network it needs (batch norm for MCBN, dropout for MC
dropout, no batch norm for BBB / IBNN / stochastic normalisation where the factory allows it);
the deterministic baseline for training time uses the same variant.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from bayesify.methods import METHODS, Deterministic, Method
from bayesify.models import lenet, mlp, resnet
from bayesify.nn import MCBatchNorm
from bayesify.nn.folding import chunk_plan, fold_samples, repeat_samples, resolve_max_rows
from bayesify.predictive import Predictive, Task
from bayesify.seeding import seeded

log = logging.getLogger(__name__)

MODELS = ("mlp", "lenet", "resnet")
# the methods of issue 5 by class name; the registry name is looked up (a missing one is skipped)
METHOD_CLASSES = ("MCBN", "MCDropout", "BayesByBackprop", "IBNN", "StochasticNorm", "DeepEnsemble")
UCI_FEATURES = 8
TRAIN_ROWS = 512  # random "training" rows for the MCBN bank and Algorithm 1's mini-batches
DROPOUT = 0.1


def resolve_method(name: str) -> str | None:
    """Registry name for a class name or registry name (case-insensitive); None if absent."""
    key = name.strip().lower().replace("_", "-")
    for reg, cls in METHODS.items():
        if key in (reg, cls.__name__.lower()):
            return reg
    return None


def input_shape(model: str) -> tuple[int, ...]:
    """Shape of one input row for ``model``."""
    return (UCI_FEATURES,) if model == "mlp" else (1, 28, 28)


def task_of(model: str) -> Task:
    return Task.REGRESSION if model == "mlp" else Task.CLASSIFICATION


def build_net(model: str, method: str) -> nn.Module:
    """The network variant ``method`` (a registry name) is benchmarked on."""
    batch_norm = method in ("mcbn", "mc-dropout", "deterministic")
    drop = DROPOUT if method == "mc-dropout" else 0.0
    norm = "batch" if batch_norm else None
    if model == "mlp":
        return mlp(UCI_FEATURES, 1, (50, 50), norm=norm, dropout=drop)
    if model == "lenet":
        return lenet(norm=norm, dropout=drop)
    if model == "resnet":
        net = resnet()  # always has batch norm
        if drop:
            net.insert(len(net) - 1, nn.Dropout(drop))
        return net
    raise ValueError(f"unknown model {model!r}; valid: {', '.join(MODELS)}")


def random_data(model: str, rows: int, seed: int) -> tuple[Tensor, Tensor]:
    """Random inputs ``[rows, ...]`` and targets of the right kind for ``model``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, *input_shape(model), generator=g)
    if task_of(model) is Task.REGRESSION:
        return x, torch.randn(rows, generator=g)
    return x, torch.randint(0, 10, (rows,), generator=g)


@dataclass
class Case:
    """One method on one network, ready to predict, with the data Algorithm 1 draws from."""

    method: Method
    train_x: Tensor
    train_y: Tensor
    plain: nn.Module | None = None  # the same network variant, plain (the floor of a pass)


def build_case(
    method: str,
    model: str,
    *,
    bank_batch: int = 32,
    bank_size: int = 128,
    device: torch.device | str = "cpu",
    net_of: str | None = None,
    options: dict[str, Any] | None = None,
) -> Case:
    """Construct ``method`` (registry name) on ``model`` on ``device``; MCBN gets a bank of
    ``bank_size`` mini-batches of ``bank_batch`` random training rows. ``net_of``: build the
    network variant of that method instead (the deterministic baseline of a method is the
    plain training of the method's own network); ``options``: method options."""
    cls = Deterministic if method == "deterministic" else METHODS[method]
    with seeded(0):
        net = build_net(model, net_of or method)
        plain = build_net(model, net_of or method).to(device).eval()
        m = cls(net.to(device), task=task_of(model), **(options or {}))
    train_x, train_y = (t.to(device) for t in random_data(model, TRAIN_ROWS, seed=1))
    if method == "mcbn":
        m.fill_bank((train_x, train_y), batch_size=bank_batch, bank_size=bank_size)
    m.net.eval()
    return Case(m, train_x, train_y, plain)


def plain_pass(case: Case, x: Tensor, samples: int) -> Tensor:
    """The floor of a one-pass prediction: the plain network (no stochastic layers) over the
    same ``T*N`` rows in the same row chunks as the one pass. ``[T, N, ...]``."""
    if case.plain is None:
        raise ValueError("the case has no plain network")
    ranges, per_chunk = chunk_plan(samples, len(x), resolve_max_rows("auto", x, case.method.net))
    with torch.no_grad():
        groups = [
            torch.cat(
                [
                    fold_samples(case.plain(repeat_samples(c, b - a)), b - a)
                    for c in x.split(per_chunk)
                ],
                1,
            )  # fmt: skip
            for a, b in ranges
        ]
    return torch.cat(groups, 0)


def teye_algorithm1(
    method: Method,
    x: Tensor,
    train_x: Tensor,
    samples: int,
    batch_size: int = 32,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Teye et al.'s Algorithm 1, as their code runs it: for each of T samples draw a fresh
    training mini-batch of ``batch_size`` rows, forward it together with the query ``x [N, ...]``
    in train-mode batch norm, keep the query's outputs. ``[T, N, ...]``.

    Running statistics are left untouched (momentum 0 during the loop, counters restored).
    """
    layers = [m for m in method.net.modules() if isinstance(m, MCBatchNorm)]
    if not layers:
        raise ValueError("Algorithm 1 needs MCBN batch-norm layers")
    saved = [(m.momentum, m.num_batches_tracked.clone()) for m in layers]
    method.net.eval()
    for m in layers:
        m.train()
        m.momentum = 0.0
    outs = []
    try:
        with torch.no_grad():
            for _ in range(samples):
                idx = torch.randperm(len(train_x), generator=generator)[:batch_size]
                out = method.net(torch.cat([train_x[idx], x]))  # [b+N, ...]
                outs.append(out[batch_size:])
    finally:
        for m, (momentum, count) in zip(layers, saved, strict=True):
            m.momentum = momentum
            m.num_batches_tracked.copy_(count)
            m.eval()
    return torch.stack(outs)  # [T, N, ...]


Variant = Callable[[int], Predictive]


def variants(case: Case, x: Tensor, samples: int, bank_batch: int = 32) -> dict[str, Variant]:
    """The ways to get a Predictive with ``samples`` draws at ``x``, keyed by name; each takes
    a repetition index used as the seed. All end in the same Predictive construction."""
    m = case.method
    out: dict[str, Variant] = {
        "one-pass": lambda r: m.predict(x, samples, seed=r),
        "loop": lambda r: m.to_predictive(
            m.reference_samples(x, samples, torch.Generator().manual_seed(r))
        ),
    }
    if case.plain is not None:
        out["floor"] = lambda _r: m.to_predictive(plain_pass(case, x, samples))
    if m.name == "mcbn":
        out["teye"] = lambda r: m.to_predictive(
            teye_algorithm1(
                m, x, case.train_x, samples, bank_batch, torch.Generator().manual_seed(r)
            )
        )
    return out


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device) -> float:
    """Wall seconds of ``fn()`` (device work included)."""
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t0


def time_interleaved(
    fns: dict[str, Callable[[int], Any]], repeats: int, warmup: int, device: torch.device
) -> dict[str, list[float]]:
    """Seconds per call of each function, ``repeats`` times, after ``warmup`` untimed rounds.

    The functions run interleaved (a rotating order each round), so machine noise hits them
    alike and per-round ratios are paired.
    """
    keys = list(fns)
    for w in range(warmup):
        for k in keys:
            fns[k](10_000 + w)
    times: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(repeats):
        s = r % len(keys)
        for k in keys[s:] + keys[:s]:
            times[k].append(timed(lambda k=k, r=r: fns[k](r), device))
    return times


def _rss_mib() -> float:
    """Current resident set size of this process (MiB), from /proc/self/statm."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _trim_heap() -> None:
    """Give the C heap's free pages back to the OS (glibc), so RSS tracks live memory."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def peak_memory_cpu(fn: Callable[[], Any], interval: float = 5e-4) -> float:
    """Peak rise of the resident set size (MiB) during ``fn()``: the heap is trimmed first, then
    a thread polls RSS every ``interval`` seconds while ``fn`` runs (allocations shorter than
    that can be missed: a lower bound)."""
    _trim_heap()
    base = _rss_mib()
    peak = base
    done = threading.Event()

    def poll() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_mib())
            time.sleep(interval)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        fn()
        peak = max(peak, _rss_mib())
    finally:
        done.set()
        thread.join()
    return max(0.0, peak - base)


def peak_memory_cuda(fn: Callable[[], Any], device: torch.device) -> float:
    """Peak CUDA memory allocated (MiB) above the level before ``fn()``."""
    synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - base) / 2**20
