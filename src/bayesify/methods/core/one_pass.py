"""Methods whose network runs once over the N rows (no sample axis) and outputs a distribution's
parameters per row; the T samples are draws from that distribution (distilled students,
evidential models).

The draws cost no network pass, so they are the same whatever the chunking of the rows, in
adaptive sampling's rounds and in the reference loop (which is one unchunked forward).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from bayesify.methods.core.base import Method
from bayesify.nn import MaxRows, resolve_max_rows
from bayesify.nn.modes import eval_mode


class OnePassMethod(Method):
    """A method whose network outputs a per-row distribution ``[N, head_width]``; subclasses
    give :meth:`_draws` (parameters -> T samples ``[T, N, ...]``)."""

    head_width: int

    def heads(self, x: Tensor, max_rows: int | None = None) -> Tensor:
        """The network's outputs on checked network inputs ``x [N, ...]``: ``[N, width]``, at
        most ``max_rows`` rows per forward, outside any sampling."""
        step = max(max_rows or len(x), 1)
        outs = [self.net(x[a : a + step]) for a in range(0, len(x), step)]
        out = torch.cat(outs) if outs else self.net(x)
        if out.dim() != 2 or out.shape[-1] != self.head_width:
            raise ValueError(
                f"{type(self).__name__}'s network must output [N, {self.head_width}], got "
                f"{list(out.shape)}: its last nn.Linear is not its output layer"
            )
        return out

    def _draws(self, out: Tensor, samples: int, generator: torch.Generator | None) -> Tensor:
        """Network outputs ``[N, width]`` -> T samples ``[T, N, ...]``."""
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
        """One pass over the N rows, then T draws."""
        return self._draws(self.heads(x, max_rows), samples, generator)

    def _prefix_sampler(
        self, x: Tensor, generator: torch.Generator | None, max_rows: MaxRows
    ) -> Callable[[Tensor, int], Tensor] | None:
        """Adaptive sampling's rounds: the network runs once over ``x``; every round only draws
        (the same draws as ``self.sample(x[rows], T, generator=generator)``)."""
        x, _ = self._sample_inputs(x, 1, None, None)
        with eval_mode(self.net), torch.no_grad():
            out = self.heads(x, resolve_max_rows(max_rows, x, self.net))

        def draw(rows: Tensor, samples: int) -> Tensor:
            return self._draws(out[rows.to(out.device)], samples, generator)

        return draw

    def reference_samples(
        self, x: Tensor, samples: int, generator: torch.Generator | None = None
    ) -> Tensor:
        """One unchunked forward over all N rows, then the same draws (the network has no
        sample axis to loop over)."""
        x, _ = self._sample_inputs(x, samples, None, None)
        with eval_mode(self.net), torch.no_grad():
            return self._draws(self.heads(x), samples, generator)
