"""The training losses of the evidential heads, per row.

Regression (Amini et al. 2020): the NIG's negative log marginal likelihood
(:func:`~bayesify.predictive.nig.nig_nll`) plus ``coeff * |y - gamma| * (2 nu + alpha)``, the
evidence regulariser (eq. 9: evidence on a wrong mean costs in proportion to the error).

Classification (Sensoy et al. 2018): a data term under p ~ Dir(alpha) (eq. 3-5, by
:class:`~bayesify.options.EvidentialLoss`) plus the KL divergence from the uniform Dirichlet
of the Dirichlet whose concentrations for the true class are set to 1 (``alpha~ = y + (1 - y)
alpha``: only misleading evidence is penalised), its weight annealed from 0 to 1.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bayesify.options import EvidentialLoss
from bayesify.predictive.nig import nig_nll


def evidential_regression_loss(
    y: Tensor, gamma: Tensor, nu: Tensor, alpha: Tensor, beta: Tensor, coeff: float
) -> Tensor:
    """Per row ``[N]``: NIG NLL + ``coeff * |y - gamma| * (2 nu + alpha)``."""
    return nig_nll(y, gamma, nu, alpha, beta) + coeff * (y - gamma).abs() * (2 * nu + alpha)


def dirichlet_data_loss(alpha: Tensor, onehot: Tensor, kind: EvidentialLoss) -> Tensor:
    """The data term per row ``[N]`` for concentrations and one-hot labels ``[N, C]``."""
    s = alpha.sum(-1, keepdim=True)
    if kind is EvidentialLoss.MSE:
        p = alpha / s
        return ((onehot - p) ** 2 + p * (1 - p) / (s + 1)).sum(-1)
    if kind is EvidentialLoss.DIGAMMA:
        return (onehot * (torch.digamma(s) - torch.digamma(alpha))).sum(-1)
    return (onehot * (s.log() - alpha.log())).sum(-1)


def kl_to_uniform(alpha: Tensor) -> Tensor:
    """``KL(Dir(alpha) || Dir(1, ..., 1))`` per row ``[N]`` for ``alpha [N, C]``."""
    c = alpha.shape[-1]
    s = alpha.sum(-1)
    return (
        torch.lgamma(s)
        - math.lgamma(c)
        - torch.lgamma(alpha).sum(-1)
        + ((alpha - 1) * (torch.digamma(alpha) - torch.digamma(s).unsqueeze(-1))).sum(-1)
    )


def misleading_kl(alpha: Tensor, onehot: Tensor) -> Tensor:
    """The KL term per row ``[N]``: the true class's concentration set to 1, the rest kept."""
    return kl_to_uniform(onehot + (1 - onehot) * alpha)
