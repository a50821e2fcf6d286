"""The sample axis on the batch axis: folding ``[T, N, ...]`` into ``[T*N, ...]`` rows and
back, and the chunking that bounds the rows of every forward.

A prediction with T samples is one forward over ``T*N`` rows (:func:`repeat_samples`, group t =
rows ``t*N .. t*N+N-1``) folded back to ``[T, N, ...]`` (:func:`fold_samples`). Memory is bounded
by ``max_rows`` rows per forward (:func:`chunk_plan`): while T <= ``max_rows`` the N rows are
split into chunks of ``max_rows // T``; beyond that the T groups are split too, into ranges of
``max_rows`` groups run alone (``select_groups``) over one data row at a time. Every stochastic
layer draws per (group, data row), so chunked samples equal one-pass samples
(:func:`forward_in_chunks`).

The chunks are written into one output allocated once (no list of chunks joined at the end:
thousands of small kept chunks between large freed temporaries made glibc's heap grow without
bound). One call's samples are limited to ``max_bytes`` (:func:`check_sample_bytes`): the
``[T, N, ...]`` output plus the per-group draws, refused with the figure before it is allocated.

The leading layers of an ``nn.Sequential`` that hold no stochastic layer compute the same for
every sample group, so they run once over the N rows and only their output is repeated T times
(:func:`deterministic_prefix`): MC dropout before the dense head samples the convolutions once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from torch import Tensor, nn

from bayesify.nn.allocator import tune_allocator
from bayesify.nn.net_facts import Facts, prefix_of
from bayesify.nn.stochastic import StochasticModule, group_bytes, select_groups
from bayesify.options import shown

MaxRows = int | Literal["auto"] | None
DEFAULT_MAX_ROWS: MaxRows = "auto"
#: ``max_rows="auto"``: input numbers per forward on CPU, and the bounds on rows per forward
AUTO_CPU_INPUT_NUMBERS, AUTO_CPU_ROWS, AUTO_CUDA_ROWS = 2**17, (64, 1024), 8192
#: ``max_rows="auto"`` on CPU: numbers of the widest activation per forward
AUTO_CPU_ACTIVATION_NUMBERS = 2**22
#: bytes one call's samples may hold by default (``max_bytes``): output and per-group draws
DEFAULT_MAX_BYTES: int | None = 2**30


def _size(n: float) -> str:
    """``n`` bytes for a person: ``'7.5 GiB'``, ``'320.0 MiB'``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} bytes"


def check_sample_bytes(
    samples: int, rows: int, row_numel: int, itemsize: int, per_group: int, max_bytes: int | None
) -> None:
    """Refuse a call whose samples ``[T, N, ...]`` (``row_numel`` numbers of ``itemsize``
    bytes per sample and row) and per-group draws (``per_group`` bytes per sample) would
    exceed ``max_bytes`` (None: no limit), with the figure, in one line (``ValueError``)."""
    if max_bytes is None:
        return
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
        raise ValueError(f"max_bytes must be a positive int or None, got {max_bytes}")
    need = samples * (rows * row_numel * itemsize + per_group)
    if need > max_bytes:
        raise ValueError(
            f"{samples} samples of {rows} row(s) need {_size(need)}, over the {_size(max_bytes)} "
            "one call may hold (max_bytes); ask for fewer samples or fewer rows per call"
        )


def repeat_samples(x: Tensor, samples: int) -> Tensor:
    """``[N, ...]`` -> ``[T*N, ...]`` with group t holding a copy of ``x``."""
    return x.unsqueeze(0).expand(samples, *x.shape).reshape(samples * x.shape[0], *x.shape[1:])


def fold_samples(y: Tensor, samples: int, dim: int = 0) -> Tensor:
    """``[..., T*N, ...]`` -> ``[..., T, N, ...]``, splitting axis ``dim`` into T groups
    (``dim=0``: ``[T*N, ...]`` -> ``[T, N, ...]``)."""
    if y.shape[dim] % samples:
        raise ValueError(f"{y.shape[dim]} rows do not split into {samples} sample groups")
    return y.unflatten(dim, (samples, y.shape[dim] // samples))


def widest_row(net: nn.Module, x: Tensor) -> int:
    """Numbers per row of the widest activation of ``net`` on inputs ``x [N, ...]``, estimated
    from its layers' sizes without running it: the input, every ``nn.Linear``'s outputs, and
    the output channels times the input's positions of a convolution that reads the input's
    channels (later convolutions are taken to work on fewer positions: pooling, strides)."""
    row = x[0].numel() if len(x) else 1
    images = x.dim() > 2 and x.shape[1] > 0
    positions = max(1, row // x.shape[1]) if images else 1
    widest = row
    for m in net.modules():
        if isinstance(m, nn.Linear):
            widest = max(widest, m.out_features)
        elif isinstance(m, nn.Conv1d | nn.Conv2d | nn.Conv3d) and images:
            reads_input = m.in_channels == x.shape[1]
            widest = max(widest, m.out_channels * positions if reads_input else 0)
    return widest


def resolve_max_rows(
    max_rows: MaxRows, x: Tensor, net: nn.Module | None = None, *, facts: Facts | None = None
) -> int | None:
    """Rows per forward pass for inputs ``x [N, ...]``: an int as given (None or 0: no limit).

    ``"auto"``: on CUDA 8192 rows; elsewhere about 2**17 input numbers per forward, between 64
    and 1024 rows (a LeNet image: 167 rows; a UCI row: 1024). Measured on CPU, larger forwards
    run out of cache and cost more per row than they save in calls (benchmarks/speed.md). With
    ``net``, CPU forwards are also kept to about 2**22 numbers in its widest activation
    (:func:`widest_row`), below 64 rows if need be: a 30,000-unit layer gets 139 rows.
    ``facts``: ``net``'s cached :class:`~bayesify.nn.net_facts.Facts`, which remember that
    width per input row shape.
    """
    if max_rows != "auto":
        if max_rows is not None and (not isinstance(max_rows, int) or max_rows < 0):
            raise ValueError(
                f'max_rows must be a positive int, None or "auto", got {shown(max_rows)}'
            )
        return max_rows or None
    if x.device.type == "cuda":
        return AUTO_CUDA_ROWS
    lo, hi = AUTO_CPU_ROWS
    rows = min(hi, max(lo, AUTO_CPU_INPUT_NUMBERS // max(1, math.prod(x.shape[1:]))))
    if net is not None:
        key = tuple(x.shape[1:])
        widest = facts.widest.get(key) if facts is not None and len(x) else None
        if widest is None:
            widest = widest_row(net, x)
            if facts is not None and len(x):
                facts.widest[key] = widest
        rows = min(rows, max(1, AUTO_CPU_ACTIVATION_NUMBERS // widest))
    return rows


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
    max_bytes: int | None = None,
    facts: Facts | None = None,
) -> Tensor:
    """``forward`` over every group range (``select_groups`` on ``net`` when there are several)
    and row chunk of ``x``, inside an open sampling block; outputs written into one tensor along
    the group axis ``group_dim`` (0: ``[K, N, ...]``; 1: stacked members ``[M, K, N, ...]``),
    allocated after the first chunk and refused first if it would exceed ``max_bytes``
    (:func:`check_sample_bytes`, with ``net``'s per-group draws).

    When ``forward`` is ``net`` itself, its :func:`deterministic_prefix` runs once per data row,
    over blocks of ``G·n`` rows (as many as one forward of the rest holds), and the rest over
    the repeated rows of each chunk. ``start`` > 0: ``x`` already holds the output
    of ``net[:start]`` (a prefix computed once and reused), and only ``net[start:]`` runs.
    ``facts``: ``net``'s cached :class:`~bayesify.nn.net_facts.Facts` (prefix, stochastic
    layers), found again otherwise."""
    tune_allocator()  # once per process: no heap trimming after every chunk (glibc)
    split = 0
    if forward is net and not start:
        split = deterministic_prefix(net) if facts is None else prefix_of(net, facts)
    if start:
        forward = net[start:]
    elif split:
        head, forward = net[:split], net[split:]
    out: Tensor | None = None
    for a, b in ranges:
        if len(ranges) > 1:
            select_groups(net, a, b)
        row = 0
        # the prefix sees as many rows per forward as the repeated part does (G·n), not n:
        # small forwards of a large layer re-read its weights once per chunk
        for block in x.split(per_chunk * (b - a) if split else len(x) or 1):
            h = head(block) if split else block
            for chunk in h.split(per_chunk):
                y = fold_samples(forward(repeat_samples(chunk, b - a)), b - a, group_dim)
                if out is None:  # [(M,) G, n, ...]
                    per_group = group_bytes(net, None if facts is None else facts.stochastic)
                    out = _output_like(y, group_dim, ranges[-1][1], len(x), per_group, max_bytes)
                out[(slice(None),) * group_dim + (slice(a, b), slice(row, row + len(chunk)))] = y
                row += len(chunk)
                del y  # freed before the next chunk's forward
    if out is None:
        raise ValueError("forward_in_chunks needs at least one group range and one row")
    return out


def _output_like(
    y: Tensor, group_dim: int, groups: int, rows: int, per_group: int, max_bytes: int | None
) -> Tensor:
    """The empty output of a whole pass shaped as chunk ``y`` with ``groups`` groups and
    ``rows`` rows, after :func:`check_sample_bytes`."""
    shape = list(y.shape)
    shape[group_dim], shape[group_dim + 1] = groups, rows
    samples = math.prod(shape[: group_dim + 1])
    row_numel = math.prod(shape[group_dim + 2 :])
    check_sample_bytes(samples, rows, row_numel, y.element_size(), per_group, max_bytes)
    return y.new_empty(shape)
