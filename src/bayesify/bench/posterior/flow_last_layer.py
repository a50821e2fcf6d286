"""``FlowPosterior`` on a real last layer, where the exact posterior is Gaussian: one job per
(seed, dataset, q) of ``bayesify bench flow-banana``'s second table.

A one-hidden-layer MLP of 50 units is trained deterministically on Gal's split 0 of a UCI
dataset; given its body and the noise variance the flow's ELBO learned, the last layer's exact
posterior is Gaussian (closed form). Each q is scored by the KL of its moment-matched Gaussian
to it, by the median ratio of its per-weight standard deviations to the exact ones, and by test
log-likelihood beside the exact posterior's (same noise, as many draws).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LastLayerJob:
    """One row of the store: q of kind ``method`` on the last layer of a net trained on UCI
    ``dataset``'s Gal split ``split`` with ``seed`` (the net, the fit, the draws)."""

    method: str
    dataset: str
    split: int
    seed: int
    uci_steps: int = 2000
    epochs: int = 200


def gaussian_kl(m0: Tensor, s0: Tensor, m1: Tensor, s1: Tensor) -> float:
    """KL(N(m0, s0) ‖ N(m1, s1)) of full-covariance Gaussians (closed form)."""
    inv, d = torch.linalg.inv(s1), m1 - m0
    return float(0.5 * (torch.trace(inv @ s0) + d @ inv @ d - len(m0)
                        + torch.logdet(s1) - torch.logdet(s0)))  # fmt: skip


def score_last_layer_job(job: LastLayerJob) -> dict[str, Any]:
    """Train the net, fit ``FlowPosterior`` of kind ``job.method`` on its last layer and score
    it against the exact Gaussian posterior (the runner's job function): ``kl``, ``std_ratio``
    (median over weights of q's std / the exact std), ``test_ll``, ``exact_test_ll`` and
    ``fit_seconds``."""
    import bayesify
    from bayesify.data import load_uci
    from bayesify.models import mlp
    from bayesify.predictive import Predictive

    split = load_uci(job.dataset, job.split)
    train = (split.x_train, split.y_train)
    torch.manual_seed(job.seed)
    net = bayesify.Deterministic(mlp(split.x_train.shape[1], hidden=(50,), norm=None))
    net.fit(train, epochs=job.epochs, batch_size=32, lr=1e-2, progress=False, seed=job.seed)
    t = time.perf_counter()
    method = bayesify.FlowPosterior.from_pretrained(
        net.net, train, flow=job.method, elbo_steps=job.uci_steps, elbo_samples=16,
        init_scale=0.05, seed=job.seed,
    )  # fmt: skip
    seconds = time.perf_counter() - t
    h, y = method.features(train)
    a = torch.cat([h, torch.ones(len(h), 1)], 1).double()
    noise = method.noise_variance
    cov = torch.linalg.inv(a.T @ a / noise + torch.eye(a.shape[1]) / method.config.prior_sigma**2)
    mean = cov @ a.T @ y.double() / noise
    draws = method.posterior.sample(20000, torch.Generator().manual_seed(job.seed + 5)).double()
    kl = gaussian_kl(draws.mean(0), draws.T.cov(), mean, cov)
    ratio = float((draws.std(0) / cov.diagonal().sqrt()).median())
    pred = method.predict(split.x_test, samples=1000, seed=job.seed)
    g = torch.Generator().manual_seed(job.seed + 6)
    exact_w = mean + torch.randn(1000, len(mean), generator=g, dtype=mean.dtype) @ (
        torch.linalg.cholesky(cov).T
    )
    ht, _ = method.features((split.x_test, split.y_test))
    at = torch.cat([ht, torch.ones(len(ht), 1)], 1).double()
    exact = Predictive.regression((exact_w @ at.T).float(), noise)
    ll = float(pred.log_prob(split.y_test).mean())
    log.info("%s %s seed %d: KL %.3f, std ratio %.2f, test LL %.3f", job.dataset, job.method,
             job.seed, kl, ratio, ll)  # fmt: skip
    exact_ll = float(exact.log_prob(split.y_test).mean())
    return {"kl": kl, "std_ratio": ratio, "test_ll": ll, "exact_test_ll": exact_ll,
            "fit_seconds": seconds}  # fmt: skip
