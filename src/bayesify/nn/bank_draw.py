"""Per-row bank draws for MC batch norm: which recorded mini-batch each (sample, data row) uses.

Data row i orders the bank's ``B`` rows at random: the argsort of ``B`` counter-based uniforms
(:func:`~bayesify.nn.row_noise.hash_uniform`) keyed by the block's key, the row's index i and the
cycle c; sample group t of row i uses position t mod B of cycle ``t // B``. So a row's samples
use distinct bank rows while T ≤ B (a uniformly random ordered subset), then whole-bank cycles;
different rows' orderings are independent. As with :class:`~bayesify.nn.row_noise.RowNoise`,
the numbers depend only on (key, row index, group index): chunking the rows or running a range of
groups alone replays them, and every batch-norm layer of the network, asking for the same range,
gets the same bank rows (the same mini-batch in every layer, Teye et al.'s Algorithm 1 per row).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from bayesify.nn.row_noise import hash_uniform


@dataclass(frozen=True, eq=False)
class BankRowDraw:
    """Per-row bank rows of one sampling block: ``bank_size`` rows, block ``key`` (an int in
    [0, 2**32)). :meth:`rows` gives the draws of a range of groups over a range of data rows."""

    bank_size: int
    key: int
    # the last range asked for and its rows: every layer of one forward asks for the same one
    _last: dict[tuple[int, int, int, int], Tensor] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.bank_size < 1:
            raise ValueError(f"the MCBN bank is empty (bank_size={self.bank_size})")
        if not 0 <= self.key < 2**32:
            raise ValueError(f"the bank-draw key must be in [0, 2**32), got {self.key}")

    def rows(self, start: int, stop: int, offset: int, n: int) -> Tensor:
        """Bank rows ``[stop - start, n]`` (int64) of groups ``start .. stop-1`` for data rows
        ``offset .. offset+n-1``."""
        if not 0 <= start < stop or offset < 0 or n < 0:
            raise ValueError(f"bad range: groups [{start}, {stop}), rows {offset}+{n}")
        key = (start, stop, offset, n)
        hit = self._last.get(key)
        if hit is not None:
            return hit
        b = self.bank_size
        data_rows = torch.arange(offset, offset + n, dtype=torch.int64)
        keys = torch.tensor([self.key], dtype=torch.int64)
        first, last = start // b, (stop - 1) // b
        cycles = []
        for c in range(first, last + 1):  # one ordering of the whole bank per row and cycle
            u = hash_uniform(keys, data_rows, b, stream=c, rows_below=offset + n)[0]  # [n, B]
            cycles.append(np.argsort(u.numpy(), axis=1, kind="stable"))
        order = np.concatenate(cycles, axis=1)[:, start - first * b : stop - first * b]
        out = torch.from_numpy(np.ascontiguousarray(order.T))  # [G, n]
        self._last.clear()
        self._last[key] = out
        return out
