"""Convergence of a reference run, judged on the predictive (weights are not identifiable:
permuting hidden units gives the same function, so weight-space R-hat says little).

For each test input, a scalar summary of every draw (regression: the network's mean output;
classification: the probability of each class) is checked across chains with NumPyro's split
R-hat (Gelman et al.) and effective sample size, and with their rank-normalised versions of
Vehtari et al. 2021 (bulk ESS and R-hat of the split chains' normal scores of the pooled ranks);
a run is called a reference only when the largest R-hat over inputs is at most
:data:`RHAT_LIMIT`.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

__all__ = ["RHAT_LIMIT", "bulk_diagnostics", "predictive_diagnostics"]

RHAT_LIMIT = 1.05


def bulk_diagnostics(v: Any) -> tuple[Any, Any]:
    """Rank-normalised split R-hat and bulk ESS (Vehtari et al. 2021) per column of
    ``v [C, S, M]`` (a numpy array): each chain split in halves, all draws of a column ranked
    together (ties averaged) and mapped to normal scores Φ⁻¹((r − 3/8) / (n + 1/4)). ->
    ``(rhat [M], ess [M])``."""
    import numpy as np
    from numpyro.diagnostics import effective_sample_size, gelman_rubin
    from scipy.special import ndtri
    from scipy.stats import rankdata

    half = v.shape[1] // 2
    split = np.concatenate([v[:, :half], v[:, v.shape[1] - half :]], axis=0)  # [2C, S/2, M]
    flat = split.reshape(-1, split.shape[-1])
    z = ndtri((rankdata(flat, axis=0) - 0.375) / (len(flat) + 0.25)).reshape(split.shape)
    return gelman_rubin(z), effective_sample_size(z)


def predictive_diagnostics(values: Tensor) -> dict[str, Any]:
    """``values [C, S, N]`` (or ``[C, S, N, K]``: every column checked) -> largest and median
    split R-hat, smallest and median effective sample size over inputs, the largest
    rank-normalised R-hat and smallest / median bulk ESS (:func:`bulk_diagnostics`), and
    ``reference``:
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
    rhat_rank, ess_bulk = bulk_diagnostics(v.numpy())
    return {
        "rhat_max": rmax,
        "rhat_median": float(np.median(rhat)),
        "ess_min": float(np.min(ess)),
        "ess_median": float(np.median(ess)),
        "rhat_rank_max": float(np.max(rhat_rank)),
        "ess_bulk_min": float(np.min(ess_bulk)),
        "ess_bulk_median": float(np.median(ess_bulk)),
        "reference": bool(rmax <= RHAT_LIMIT),
    }
