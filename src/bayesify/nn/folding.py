"""The sample axis on the batch axis: folding ``[T, N, ...]`` into ``[T*N, ...]`` rows and
back, and the chunking that bounds the rows of every forward.

A prediction with T samples is one forward over ``T*N`` rows (:func:`repeat_samples`, group t =
rows ``t*N .. t*N+N-1``) folded back to ``[T, N, ...]`` (:func:`fold_samples`). Memory is bounded
by ``max_rows`` rows per forward (:func:`chunk_plan`): while T <= ``max_rows`` the N rows are
split into chunks of ``max_rows // T``; beyond that the T groups are split too, into ranges of
``max_rows`` groups run alone (``select_groups``) over one data row at a time. Every stochastic
layer draws per (group, data row), so chunked samples equal one-pass samples
(:func:`forward_in_chunks`).

The leading layers of an ``nn.Sequential`` that hold no stochastic layer compute the same for
every sample group, so they run once over the N rows and only their output is repeated T times
(:func:`deterministic_prefix`): MC dropout before the dense head samples the convolutions once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor, nn

from bayesify.nn.stochastic import StochasticModule, select_groups

MaxRows = int | Literal["auto"] | None
DEFAULT_MAX_ROWS: MaxRows = "auto"
#: ``max_rows="auto"``: input numbers per forward on CPU, and the bounds on rows per forward
AUTO_CPU_INPUT_NUMBERS, AUTO_CPU_ROWS, AUTO_CUDA_ROWS = 2**17, (64, 1024), 8192


def repeat_samples(x: Tensor, samples: int) -> Tensor:
    """``[N, ...]`` -> ``[T*N, ...]`` with group t holding a copy of ``x``."""
    return x.unsqueeze(0).expand(samples, *x.shape).reshape(samples * x.shape[0], *x.shape[1:])


def fold_samples(y: Tensor, samples: int, dim: int = 0) -> Tensor:
    """``[..., T*N, ...]`` -> ``[..., T, N, ...]``, splitting axis ``dim`` into T groups
    (``dim=0``: ``[T*N, ...]`` -> ``[T, N, ...]``)."""
    if y.shape[dim] % samples:
        raise ValueError(f"{y.shape[dim]} rows do not split into {samples} sample groups")
    return y.unflatten(dim, (samples, y.shape[dim] // samples))


def resolve_max_rows(max_rows: MaxRows, x: Tensor) -> int | None:
    """Rows per forward pass for inputs ``x [N, ...]``: an int as given (None or 0: no limit).

    ``"auto"``: on CUDA 8192 rows; elsewhere about 2**17 input numbers per forward, between 64
    and 1024 rows (a LeNet image: 167 rows; a UCI row: 1024). Measured on CPU, larger forwards
    run out of cache and cost more per row than they save in calls (benchmarks/speed.md).
    """
    if max_rows != "auto":
        if max_rows is not None and (not isinstance(max_rows, int) or max_rows < 0):
            raise ValueError(f'max_rows must be a positive int, None or "auto", got {max_rows!r}')
        return max_rows or None
    if x.device.type == "cuda":
        return AUTO_CUDA_ROWS
    lo, hi = AUTO_CPU_ROWS
    return min(hi, max(lo, AUTO_CPU_INPUT_NUMBERS // max(1, x[0].numel() if len(x) else 1)))


def deterministic_prefix(net: nn.Module) -> int:
    """How many leading children of ``net`` (an ``nn.Sequential``) contain no stochastic layer:
    they give every sample group the same output, so :func:`forward_in_chunks` runs them once
    per data row. 0 for other modules and for a Sequential with forward hooks of its own (the
    split would bypass them)."""
    if not isinstance(net, nn.Sequential) or net._forward_hooks or net._forward_pre_hooks:
        return 0
    for i, child in enumerate(net):
        if any(isinstance(m, StochasticModule) for m in child.modules()):
            return i
    return len(net)


def chunk_plan(
    k: int, n: int, max_rows: int | None, factor: int = 1
) -> tuple[list[tuple[int, int]], int]:
    """Group ranges and data rows per forward for ``k`` sample groups over ``n`` rows, so that
    ``factor * groups * rows <= max_rows`` (``factor``: networks run together per row, e.g. an
    ensemble's members under vmap). Up to ``max_rows`` groups the N rows are chunked; beyond,
    the groups are split into ranges run over one data row at a time."""
    if not max_rows:
        return [(0, k)], max(1, n)
    if k * factor <= max_rows:
        return [(0, k)], max(1, max_rows // (k * factor))
    width = max(1, max_rows // factor)
    return [(a, min(a + width, k)) for a in range(0, k, width)], 1


def forward_in_chunks(
    net: nn.Module,
    x: Tensor,
    ranges: list[tuple[int, int]],
    per_chunk: int,
    forward: Callable[[Tensor], Tensor],
    group_dim: int,
    start: int = 0,
) -> Tensor:
    """``forward`` over every group range (``select_groups`` on ``net`` when there are several)
    and row chunk of ``x``, inside an open sampling block; outputs joined along the group axis
    ``group_dim`` (0: ``[K, N, ...]``; 1: stacked members ``[M, K, N, ...]``).

    When ``forward`` is ``net`` itself, its :func:`deterministic_prefix` runs once per chunk of
    data rows and the rest over the repeated rows. ``start`` > 0: ``x`` already holds the output
    of ``net[:start]`` (a prefix computed once and reused), and only ``net[start:]`` runs."""
    split = deterministic_prefix(net) if forward is net and not start else 0
    if start:
        forward = net[start:]
    elif split:
        head, forward = net[:split], net[split:]
    parts = []
    for a, b in ranges:
        if len(ranges) > 1:
            select_groups(net, a, b)
        chunks = [  # [(M,) G, n, ...] each
            fold_samples(
                forward(repeat_samples(head(chunk) if split else chunk, b - a)), b - a, group_dim
            )  # fmt: skip
            for chunk in x.split(per_chunk)
        ]
        parts.append(torch.cat(chunks, dim=group_dim + 1))
    return torch.cat(parts, dim=group_dim)
