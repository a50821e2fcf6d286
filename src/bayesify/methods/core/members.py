"""Methods whose M members run together in one forward pass and are the predictive's samples
(BatchEnsemble, Packed-Ensembles).

The members are deterministic, so the mixture is exact once each has run
(:meth:`MembersInOnePass.distinct_samples` is M), and T is always M
(:meth:`MembersInOnePass.sample_count`): a smaller T is rounded up to M (every member weighs the
same), a larger one is not drawn, since further samples would only repeat members and add no
information (``pred.num_samples`` says M). ``samples="adaptive"`` returns the M members with
``samples_used`` M for every row (:mod:`.adaptive`: the first draw holds every distinct
sample). The rows are cut into chunks so that no forward runs more than ``max_rows`` rows; each
chunk is one forward, written into one output allocated after the first chunk, and the call is
refused before that allocation when its T samples would exceed ``max_bytes``.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import Tensor

from bayesify.methods.core.base import Method
from bayesify.nn import check_sample_bytes


class MembersInOnePass(Method):
    """A method with ``config.members`` members that one forward pass runs together; subclasses
    give :meth:`_members_forward` (a chunk of n rows -> ``[M, n, ...]``) and, where a forward
    runs each row once per member, :meth:`_forward_rows`."""

    config: Any  # a MethodConfig with ``members``

    @property
    def members(self) -> int:
        return int(self.config.members)

    def distinct_samples(self) -> int:
        """The M members: the mixture is exact once each has run."""
        return self.members

    def sample_count(self, samples: int) -> int:
        """Always M: the M members are the predictive's samples, and its mixture is exact with
        them (fewer would weigh members unequally; more would only repeat them)."""
        return self.members

    def _forward_rows(self) -> int:
        """Rows of a forward per input row: 1 (one row's output holds every member)."""
        return 1

    def _members_block(self, generator: torch.Generator | None) -> AbstractContextManager[Any]:
        """The context the members' forwards run in (none by default)."""
        return nullcontext()

    def _members_forward(self, chunk: Tensor) -> Tensor:
        """One forward over ``chunk [n, ...]``: the members' outputs ``[M, n, ...]``."""
        raise NotImplementedError

    def _draw_samples(
        self,
        x: Tensor,
        samples: int,
        generator: torch.Generator | None,
        max_rows: int | None,
        start: int = 0,
        max_bytes: int | None = None,
    ) -> Tensor:
        """The M members in one forward per chunk of rows, ``[M, N, ...]`` (``samples`` is M,
        by :meth:`sample_count`). A chunk holds ``max_rows // _forward_rows()`` rows; where
        that is none (or ``x`` is a prefix's output, ``start`` > 0) the shared chunked pass of
        M sample groups runs instead, which splits the members too."""
        m, per_row = self.members, self._forward_rows()
        if start or (max_rows is not None and max_rows < per_row):
            out = super()._draw_samples(x, m, generator, max_rows, start, max_bytes)
        else:
            per_chunk = len(x) if max_rows is None else max_rows // per_row
            out = self._members_pass(x, generator, per_chunk, samples, max_bytes)
        return out

    def _members_pass(
        self,
        x: Tensor,
        generator: torch.Generator | None,
        per_chunk: int,
        samples: int,
        max_bytes: int | None,
    ) -> Tensor:
        """``[M, N, ...]``: chunks of ``per_chunk`` rows, each one :meth:`_members_forward`,
        written into one output allocated after the first chunk (refused first when the
        call's T samples would exceed ``max_bytes``)."""
        m, out = self.members, None
        with self._members_block(generator):
            for i in range(0, len(x), per_chunk):
                y = self._members_forward(x[i : i + per_chunk])
                if out is None:
                    row = math.prod(y.shape[2:])
                    check_sample_bytes(samples, len(x), row, y.element_size(), 0, max_bytes)
                    out = y.new_empty((m, len(x), *y.shape[2:]))
                out[:, i : i + y.shape[1]] = y
        assert out is not None
        return out
