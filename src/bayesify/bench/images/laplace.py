"""Laplace rows of ``bayesify bench images``: post-hoc on the deterministic network of the same
seed (as MCBN), bayesify's last-layer KFAC Laplace with its default GLM predictive (logits drawn
from the linearised predictive, link mc) and the sampled one,
and laplace-torch 0.3 itself (last-layer KFAC, marginal-likelihood prior, probit) as the
reference row. Each returns the method and its fit seconds."""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
from torch import nn

from bayesify.predictive import Predictive

#: images method name -> what it is
LAPLACE_METHODS = {
    "laplace": "bayesify Laplace's default: last-layer KFAC, marglik prior, GLM, drawn logits",
    "laplace-sampled": "bayesify Laplace, last-layer KFAC, marglik prior, sampled last layer",
    "laplace-torch": "laplace-torch 0.3, last-layer KFAC, marglik prior, GLM probit",
}


class LaplaceTorch:
    """laplace-torch's fitted last-layer Laplace behind ``predict(x, samples, seed)``: the
    probit probabilities as T equal samples (as bayesify's probit predictive gives them)."""

    def __init__(self, net: nn.Module, train: tuple[torch.Tensor, torch.Tensor], batch_size: int):
        from laplace import Laplace
        from torch.utils.data import DataLoader, TensorDataset

        self.la = Laplace(copy.deepcopy(net).eval(), "classification",
                          subset_of_weights="last_layer", hessian_structure="kron")  # fmt: skip
        self.la.fit(DataLoader(TensorDataset(*train), batch_size=batch_size))
        self.la.optimize_prior_precision(method="marglik")

    def predict(self, x: torch.Tensor, samples: int = 1, seed: int = 0) -> Predictive:
        with torch.no_grad():
            p = torch.cat([self.la(c, pred_type="glm", link_approx="probit")
                           for c in x.split(1000)])  # fmt: skip
        p = p / p.sum(-1, keepdim=True)
        return Predictive.classification(p.unsqueeze(0).expand(samples, -1, -1))


def posthoc_laplace(kind: str, net: nn.Module, data: dict[str, Any], job: Any) -> tuple[Any, float]:
    """The Laplace method ``kind`` (a key of :data:`LAPLACE_METHODS`) fitted on the training
    images around ``net``, and its fit seconds."""
    import bayesify

    t0 = time.perf_counter()
    if kind == "laplace-torch":
        method: Any = LaplaceTorch(net, data["train"], job.batch_size)
    else:
        predictive = "sampled" if kind == "laplace-sampled" else "glm"
        method = bayesify.Laplace.from_pretrained(net, data["train"], task="classification",
                                                  batch_size=job.batch_size, hessian="kfac",
                                                  predictive=predictive)  # fmt: skip
    return method, time.perf_counter() - t0
