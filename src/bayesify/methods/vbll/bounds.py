"""VBLL's deterministic training bounds (Harrison, Willes & Snoek 2024, Theorems 1 and 2):
closed forms in the posterior's moments, no sampling.

With ``φ̃ [N, D]`` the last layer's (augmented) features, ``m = φ̃ w̄ᵀ [N, out]`` and
``v_k = φ̃ᵀ S_k φ̃``:

- regression, ``E_q[log N(y | Wφ̃, Σ)] = Σ_k log N(y_k | m_k, σ_k²) − ½ v_k / σ_k²`` (exact);
- classification (discriminative, logits ``z = Wφ̃ + ε``, ``ε ~ N(0, Σ)``),
  ``E[log softmax(z)_y] ≥ m_y − log Σ_k exp(m_k + ½ (v_k + σ_k²))`` (Jensen on the log-sum-exp).

The regularisers: ``KL(q ‖ p)`` of the weights and the Wishart prior's log density on the noise
precision, ``ν·log det Σ⁻¹ − ½ s·tr Σ⁻¹`` (up to constants, ``ν = (dof + out + 1) / 2``).
"""

from __future__ import annotations

import math

from torch import Tensor

from bayesify.nn.vbll import VBLLLinear

_LOG_2PI = math.log(2 * math.pi)


def regression_bound(layer: VBLLLinear, phi: Tensor, y: Tensor) -> Tensor:
    """Mean over rows of ``E_q[log N(y | Wφ̃, Σ)]`` (0-dim); ``phi [N, in]``, ``y [N]`` or
    ``[N, out]``."""
    phi_aug = layer.augment(phi)
    mean = phi_aug @ layer.mean().T  # [N, out]
    var = layer.noise_variance()  # [out]
    y = y.reshape(mean.shape)
    ell = -0.5 * (_LOG_2PI + var.log() + ((y - mean) ** 2 + layer.quadratic(phi_aug)) / var)
    return ell.sum(-1).mean()


def jensen_bound(layer: VBLLLinear, phi: Tensor, y: Tensor) -> Tensor:
    """Mean over rows of the lower bound on ``E[log softmax(z)_y]`` (0-dim); ``y [N]`` class
    indices."""
    phi_aug = layer.augment(phi)
    mean = phi_aug @ layer.mean().T  # [N, C]
    var = layer.quadratic(phi_aug) + layer.noise_variance()
    picked = mean.gather(1, y.long().reshape(-1, 1)).squeeze(1)
    return (picked - (mean + 0.5 * var).logsumexp(-1)).mean()


def wishart_term(layer: VBLLLinear, scale: float, dof: float) -> Tensor:
    """``ν·log det Σ⁻¹ − ½ scale·tr Σ⁻¹`` for the layer's diagonal noise Σ (0-dim)."""
    nu = (dof + layer.out_features + 1) / 2
    log_var = layer.noise_log_var
    return -nu * log_var.sum() - 0.5 * scale * (-log_var).exp().sum()
