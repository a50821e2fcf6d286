"""Drawing T samples in one pass: the sampling half of :class:`~bayesify.methods.core.base.Method`.

:class:`Sampling` is a mixin of ``Method`` (as :class:`~bayesify.methods.core.bundle.Bundled`
is): ``sample`` (checked inputs, the chunk plan, the byte limit, one pass under the method's
``sampling`` block), the reference loop of T passes the conformance suite compares it with, the
prefix sampler of adaptive sampling's rounds, and the cached facts of the network it walks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Self

import torch
from torch import Tensor, nn

from bayesify.methods.core.inputs import check_device, check_inputs, check_samples, seeded_generator
from bayesify.nn import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    MaxRows,
    check_sample_bytes,
    chunk_plan,
    forward_in_chunks,
    group_bytes,
    resolve_max_rows,
    sampling,
    select_groups,
)
from bayesify.nn.folding import deterministic_prefix
from bayesify.nn.modes import eval_mode
from bayesify.nn.net_facts import Facts, NetFacts
from bayesify.train import Data


class Sampling:
    """``sample``, ``reference_samples``, ``to`` and ``device`` (mixed into ``Method``)."""

    net: nn.Module
    input_shape: tuple[int, ...] | None

    @contextmanager
    def sampling(self, samples: int, generator: torch.Generator | None) -> Iterator[None]:
        """Turn the network's randomness on for ``samples`` groups; methods may draw first."""
        with sampling(self.net, samples, generator, layers=self._net_facts().stochastic):
            yield

    def _facts_cache(self) -> NetFacts:
        cache = self.__dict__.get("_net_facts_cache")
        if cache is None:  # also for methods built before the cache existed (unpickled)
            cache = self.__dict__["_net_facts_cache"] = NetFacts()
        return cache

    def _net_facts(self) -> Facts:
        """The network's modules, stochastic layers and deterministic prefix, found again
        only when its modules changed (:class:`~bayesify.nn.net_facts.NetFacts`)."""
        return self._facts_cache().of(self.net)

    def _walked_facts_cache(self) -> NetFacts:
        """The cache after a walk of the network as it is now (device and dtype current)."""
        cache = self._facts_cache()
        cache.of(self.net)
        return cache

    def to(self, device: str | torch.device) -> Self:
        """Move the network (and so every prediction) to ``device``; returns ``self``. Asking
        for CUDA where there is none is a ``ValueError``."""
        self.net.to(check_device(device))
        return self

    @property
    def device(self) -> torch.device:
        return self._walked_facts_cache().device

    def sample(
        self,
        x: Tensor | Data,
        samples: int = 50,
        *,
        generator: torch.Generator | None = None,
        seed: int | None = None,
        max_rows: MaxRows = DEFAULT_MAX_ROWS,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
    ) -> Tensor:
        """Raw network outputs for T samples in one pass: ``[T, N, ...]`` (T rounded up by
        :meth:`sample_count` for mixtures, so their parts weigh the same).

        ``max_rows`` bounds the rows of every forward (None: one forward over all ``T*N``
        rows; ``"auto"``: see :func:`resolve_max_rows`). Up to ``max_rows`` samples, the N
        inputs are split into chunks; more samples are split into ranges of ``max_rows`` groups
        as well. The result does not depend on it. ``max_bytes`` (default 1 GiB, None: no
        limit) bounds what the call holds, the ``[T, N, ...]`` samples and the per-group draws:
        a call that would need more is refused with the figure before it allocates it.
        """
        samples = check_samples(samples)
        cache = self._facts_cache()
        facts = cache.of(self.net)  # the call's one walk of the modules (see NetFacts.last)
        if type(self)._check_inputs is Sampling._check_inputs:  # what it does, without a walk
            x = check_inputs(x, cache.device, cache.dtype, self.input_shape)
        else:
            x = self._check_inputs(x)
        generator = seeded_generator(generator, seed)
        samples = self.sample_count(samples)
        max_rows = resolve_max_rows(max_rows, x, self.net, facts=facts)
        # at least one output number per sample and row: refused before any draw is made
        per_group = group_bytes(self.net, facts.stochastic)
        check_sample_bytes(samples, len(x), 1, x.element_size(), per_group, max_bytes)
        with eval_mode(self.net, facts.modules), torch.no_grad():
            return self._draw_samples(x, samples, generator, max_rows, max_bytes=max_bytes)

    def _draw_samples(
        self,
        x: Tensor,
        samples: int,
        generator: torch.Generator | None,
        max_rows: int | None,
        start: int = 0,
        max_bytes: int | None = None,
    ) -> Tensor:
        """The one pass (chunked) behind :meth:`sample`, on checked inputs, in eval mode under
        ``no_grad``: ``[T, N, ...]``, refused beyond ``max_bytes``. ``start`` > 0: ``x`` is the
        output of the net's first ``start`` layers (see :meth:`_prefix_sampler`). Methods with
        their own pass (ensembles) override it."""
        ranges, per_chunk = chunk_plan(samples, len(x), max_rows)
        with self.sampling(samples, generator):
            return forward_in_chunks(self.net, x, ranges, per_chunk, self.net, 0, start=start,
                                     max_bytes=max_bytes, facts=self._net_facts())  # fmt: skip

    def _prefix_sampler(
        self, x: Tensor, generator: torch.Generator | None, max_rows: MaxRows
    ) -> Callable[[Tensor, int], Tensor] | None:
        """For repeated sampling of rows of ``x`` (adaptive sampling's rounds): the net's
        deterministic prefix run once over ``x``, and ``draw(rows, T) -> [T, len(rows), ...]``
        drawing exactly what ``self.sample(x[rows], T, generator=generator)`` draws. None where
        the method samples its own way or the net has no such prefix."""
        base = Sampling
        if (type(self)._draw_samples is not base._draw_samples
                or type(self).sample_count is not base.sample_count):  # fmt: skip
            return None
        k = deterministic_prefix(self.net)
        if k == 0:
            return None
        x, _ = self._sample_inputs(x, 1, None, None)
        with eval_mode(self.net), torch.no_grad():
            h = self.net[:k](x)
        rows_budget = resolve_max_rows(max_rows, x, self.net)

        def draw(rows: Tensor, samples: int) -> Tensor:
            with eval_mode(self.net), torch.no_grad():
                return self._draw_samples(h[rows], samples, generator, rows_budget, start=k)

        return draw

    def sample_count(self, samples: int) -> int:
        """How many samples are drawn when T are asked for: T, or the next multiple of a
        mixture's parts where every part must weigh the same (an ensemble's M members, IBNN's K
        components): ``pred.num_samples`` says how many there are."""
        return samples

    def distinct_samples(self) -> int | None:
        """How many different samples the method can draw, where that is finite (the members of
        an ensemble of deterministic networks): its predictive is exact once each is drawn, and
        more samples only repeat them. None: every draw is new."""
        return None

    def reference_samples(
        self, x: Tensor, samples: int, generator: torch.Generator | None = None
    ) -> Tensor:
        """The plain loop of T passes with the same draws as :meth:`sample`: ``[T, N, ...]``.

        One sampling block of the method (so it draws exactly what the one pass draws: dropout
        keys, noise, MCBN's bank rows), then pass t runs sample group t alone over all N rows
        (``select_groups(t, t + 1)``). The conformance suite checks the one pass against it.
        """
        x, _ = self._sample_inputs(x, samples, None, None)
        samples = self.sample_count(check_samples(samples))
        outs = []
        with eval_mode(self.net), torch.no_grad(), self.sampling(samples, generator):
            for t in range(samples):
                select_groups(self.net, t, t + 1)
                outs.append(self.net(x))  # [N, ...]
        return torch.stack(outs)

    def _sample_inputs(
        self, x: Tensor, samples: int, generator: torch.Generator | None, seed: int | None
    ) -> tuple[Tensor, torch.Generator | None]:
        """Checked inputs and the generator to draw with (from ``seed`` if given)."""
        check_samples(samples)
        return self._check_inputs(x), seeded_generator(generator, seed)

    def _dtype(self) -> torch.dtype:
        """The network's floating-point dtype (its parameters')."""
        return self._walked_facts_cache().dtype

    def _check_inputs(self, x: Tensor | Data) -> Tensor:
        """Checked inputs on the network's device and dtype (see :func:`inputs.check_inputs`)."""
        cache = self._walked_facts_cache()
        return check_inputs(x, cache.device, cache.dtype, self.input_shape)
