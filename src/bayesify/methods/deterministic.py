"""The plain network as a (degenerate) method: every sample is the same prediction."""

from __future__ import annotations

import torch
from torch import Tensor

from bayesify.methods.base import Method


class Deterministic(Method):
    """No randomness at prediction: the baseline every Bayesian method is compared with."""

    name = "deterministic"

    def reference_samples(
        self, x: Tensor, samples: int, generator: torch.Generator | None = None
    ) -> Tensor:
        """T separate passes ``[T, N, ...]`` (all equal)."""
        x = self._check_inputs(x)
        self.net.eval()
        with torch.no_grad():
            return torch.stack([self.net(x) for _ in range(samples)])
