"""What both evidential methods share beyond the one pass of
:mod:`bayesify.methods.core.one_pass`: closed forms of the per-row distribution (``summaries``, in
the user's target units) and ``from_pretrained`` by fine-tuning the whole network."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from bayesify.methods.core.one_pass import OnePassMethod as CoreOnePass
from bayesify.nn.modes import eval_mode
from bayesify.train import Data


class OnePassMethod(CoreOnePass):
    """A one-pass method (:class:`~bayesify.methods.core.one_pass.OnePassMethod`) with closed
    forms of its distribution; subclasses give :meth:`_draws` and :meth:`closed_forms`."""

    def closed_forms(self, out: Tensor) -> dict[str, Tensor]:
        """Network outputs ``[N, width]`` -> the distribution's summaries in closed form."""
        raise NotImplementedError

    def _from_pretrained(
        self,
        train: Data | None,
        val: Data | None,
        *,
        batch_size: int | None,
        seed: int,
        progress: bool,
        epochs: int = 10,
        lr: float = 1e-3,
    ) -> None:
        """Train the whole network with the evidential loss on ``train`` for ``epochs`` epochs
        at ``lr`` (the head's new outputs start untrained; ``epochs=0`` keeps them)."""
        super()._from_pretrained(
            train, val, batch_size=batch_size, seed=seed, progress=progress, epochs=epochs, lr=lr
        )

    def summaries(self, x: Any) -> dict[str, Tensor]:
        """The closed forms at raw inputs ``x`` (as :meth:`predict` takes them), what the Monte
        Carlo estimates of ``predict`` converge to (see :meth:`closed_forms`)."""
        prep = self.preprocessing
        if prep is not None:
            x = prep.inputs(x)
        x = self._check_inputs(x)
        with eval_mode(self.net), torch.no_grad():
            out = self.heads(x, 4096)
        forms = self.closed_forms(out)
        if prep is not None and prep.y_mean is not None and prep.y_std is not None:
            forms = prep_units(forms, float(prep.y_mean), float(prep.y_std))
        return forms


def prep_units(forms: dict[str, Tensor], y_mean: float, y_std: float) -> dict[str, Tensor]:
    """Regression summaries from standardised target units to the user's."""
    out = {}
    for key, value in forms.items():
        if key in ("mean", "loc"):
            value = value * y_std + y_mean
        elif key.endswith("variance"):
            value = value * y_std**2
        elif key == "scale":
            value = value * y_std
        out[key] = value
    return out
