"""Per-row bank draws for MC batch norm: which recorded mini-batch each (sample, data row) uses.

Data row i shuffles the bank's ``B`` rows at random: a Fisher–Yates shuffle whose step t swaps
position t with a position drawn from t .. B-1 by a counter-based uniform
(:func:`~bayesify.nn.row_noise.hash_uniform`) keyed by the block's key, the row's index i and
(cycle c, step t); sample group t of row i uses position t mod B of cycle ``t // B``. So a row's
samples use distinct bank rows while T ≤ B (a uniformly random ordered subset), then whole-bank
cycles; different rows' shuffles are independent. Only the first T steps run (N × T uniforms,
not N × B). As with :class:`~bayesify.nn.row_noise.RowNoise`, the numbers depend only on (key,
row index, group index): chunking the rows or running a range of groups alone replays them, and
every batch-norm layer of the network, asking for the same range, gets the same bank rows (the
same mini-batch in every layer: Teye et al.'s Algorithm 1 per row).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from bayesify.nn.row_noise import hash_uniform

_PHI, _M32 = 0x9E3779B9, 0xFFFFFFFF  # the golden-ratio step between keys; 32-bit mask
AHEAD = 256  # data rows computed at once (prediction chunks are often a few dozen rows)


@dataclass(frozen=True, eq=False)
class BankRowDraw:
    """Per-row bank rows of one sampling block: ``bank_size`` rows, block ``key`` (an int in
    [0, 2**32)). :meth:`rows` gives the draws of a range of groups over a range of data rows."""

    bank_size: int
    key: int
    # rows computed ahead: groups (start, stop), data rows from .. to, and their bank rows [G, n]
    _ahead: dict[tuple[int, int], tuple[int, int, Tensor]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.bank_size < 1:
            raise ValueError(f"the MCBN bank is empty (bank_size={self.bank_size})")
        if not 0 <= self.key < 2**32:
            raise ValueError(f"the bank-draw key must be in [0, 2**32), got {self.key}")

    def rows(self, start: int, stop: int, offset: int, n: int) -> Tensor:
        """Bank rows ``[stop - start, n]`` (int64) of groups ``start .. stop-1`` for data rows
        ``offset .. offset+n-1``. Every layer of a forward asks for the same range, and the next
        chunk for the rows after it: at least :data:`AHEAD` rows are computed at once and kept
        (one computation per range of groups, not one per layer and chunk of a few rows)."""
        if not 0 <= start < stop or offset < 0 or n < 0:
            raise ValueError(f"bad range: groups [{start}, {stop}), rows {offset}+{n}")
        kept = self._ahead.get((start, stop))
        if kept is None or not kept[0] <= offset <= offset + n <= kept[1]:
            upto = offset + max(n, AHEAD)
            kept = (offset, upto, self._compute(start, stop, offset, upto - offset))
            self._ahead.clear()
            self._ahead[(start, stop)] = kept
        lo = offset - kept[0]
        return kept[2][:, lo : lo + n]

    def _compute(self, start: int, stop: int, offset: int, n: int) -> Tensor:
        """:meth:`rows` without the rows kept ahead."""
        b = self.bank_size
        data_rows = torch.arange(offset, offset + n, dtype=torch.int64)
        first, last = start // b, (stop - 1) // b
        cycles = []
        for c in range(first, last + 1):  # one shuffle of the bank per row and cycle
            steps = min(b, stop - c * b)  # positions 0 .. steps-1 of this cycle are needed
            swaps = min(steps, b - 1)  # (the last position has nothing left to swap)
            perm = np.tile(np.arange(b), (n, 1))
            at = np.arange(n)
            # step t's uniforms: key (key + t·φ) mod 2**32, stream c·B, so each (c, t) differs
            step_keys = (self.key + torch.arange(swaps, dtype=torch.int64) * _PHI) & _M32
            u = hash_uniform(step_keys, data_rows, 1, stream=c * b, rows_below=offset + n)
            u = u.numpy()[:, :, 0]  # [steps, n]
            for t in range(swaps):
                j = t + (u[t] * (b - t)).astype(np.int64)  # uniform in t .. B-1
                swapped = perm[at, j]
                perm[at, j] = perm[:, t]
                perm[:, t] = swapped
            cycles.append(perm[:, :steps])
        order = np.concatenate(cycles, axis=1)[:, start - first * b :]
        return torch.from_numpy(np.ascontiguousarray(order.T))  # [G, n]
