"""Convergence of a reference run, judged on the predictive (weights are not identifiable:
permuting hidden units gives the same function, so weight-space R-hat says little).

For each test input, a scalar summary of every draw (regression: the network's mean output;
classification: the probability of each class) is checked across chains with NumPyro's split
R-hat (Gelman et al.) and effective sample size; a run is called a reference only when the
largest R-hat over inputs is at most :data:`RHAT_LIMIT`.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

__all__ = ["RHAT_LIMIT", "predictive_diagnostics"]

RHAT_LIMIT = 1.05


def predictive_diagnostics(values: Tensor) -> dict[str, Any]:
    """``values [C, S, N]`` (or ``[C, S, N, K]``: every column checked) -> largest and median
    split R-hat, smallest and median effective sample size over inputs, and ``reference``:
    whether the largest R-hat is at most :data:`RHAT_LIMIT`."""
    from bayesify.reference.hmc import _numpyro

    _numpyro()
    import numpy as np
    from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

    if values.dim() < 3 or values.shape[0] < 2:
        raise ValueError(f"need [chains >= 2, samples, inputs], got {tuple(values.shape)}")
    v = values.double().reshape(values.shape[0], values.shape[1], -1)
    keep = v.std(dim=(0, 1)) > 1e-12  # constant columns (a saturated probability) have no R-hat
    v = v[..., keep] if keep.any() else v
    rhat = split_gelman_rubin(v.numpy())
    ess = effective_sample_size(v.numpy())
    rmax = float(np.max(rhat))
    return {
        "rhat_max": rmax,
        "rhat_median": float(np.median(rhat)),
        "ess_min": float(np.min(ess)),
        "ess_median": float(np.median(ess)),
        "reference": bool(rmax <= RHAT_LIMIT),
    }
