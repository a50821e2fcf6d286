"""A predictive's distances to the reference: on f(x), the network's output before noise (the
primary scores), and on the whole predictive (secondary), each beside the same distance between
two HMC references of one posterior (the floor).

f(x) draws are ``[T, N]`` (regression: each sample's mean) or ``[T, N, K]`` (classification:
each sample's class probabilities). The floor subsamples the second reference to the method's
``T`` draws, so that a method and the floor carry the same Monte Carlo error.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from bayesify.bench.posterior.problems import Problem
from bayesify.options import Task

W2_DRAWS = 1000  # draws per input from each predictive for the whole-predictive W2


def masked_mean(v: Tensor, mask: Tensor) -> float | None:
    return float(v[mask].double().mean()) if bool(mask.any()) else None


def fx_w2(fx: Tensor, fx_ref: Tensor) -> Tensor:
    """Per-input 1-D W2 between two sets of f(x) draws ``[T, N]`` and ``[S, N]`` (``[.., K]``:
    averaged over classes): ``[N]``."""
    from bayesify.metrics import wasserstein_1d

    if fx.dim() == 2:
        return wasserstein_1d(fx, fx_ref)
    return torch.stack([wasserstein_1d(fx[..., k], fx_ref[..., k])
                        for k in range(fx.shape[-1])]).mean(0)  # fmt: skip


def fx_std(fx: Tensor) -> Tensor:
    """Per-input std of f(x) over draws ``[N]`` (classification: root mean over classes)."""
    var = fx.double().var(0)
    return (var.mean(-1) if var.dim() == 2 else var).sqrt()


def spread(pred: Any) -> Tensor:
    """Per-input predictive std ``[N]``: regression, the mixture's; classification, the std of
    the class probabilities over samples (root mean over classes)."""
    if pred.task is Task.CLASSIFICATION:
        return fx_std(pred.samples)
    return pred.std.double()


def distances(pred: Any, ref: Any, problem: Problem, seed: int) -> dict[str, Any]:
    """Scores of ``pred`` (a method's, or the floor's) against the reference ``ref`` on the
    problem's test inputs: ``w2_f`` / ``w2_f_gap`` and ``std_ratio_f_*`` on f(x) draws
    (``pred.samples`` against ``ref.samples``), then the whole predictive's ``w2`` / ``w2_gap``
    (regression) or ``agreement`` / ``tv`` (classification, also ``_data`` and ``_gap``: over
    the inputs in the data and in the gap apart) and ``std_ratio_*``."""
    from bayesify.metrics import argmax_agreement, total_variation, wasserstein_1d

    fx, fx_ref = pred.samples, ref.samples
    w2_f = fx_w2(fx, fx_ref)
    f_ratio = fx_std(fx) / fx_std(fx_ref).clamp_min(1e-12)
    ratio = spread(pred) / spread(ref).clamp_min(1e-12)
    out: dict[str, Any] = {
        "w2_f": float(w2_f.mean()),
        "w2_f_gap": masked_mean(w2_f, problem.gap),
        "std_ratio_f_data": masked_mean(f_ratio, problem.in_data),
        "std_ratio_f_gap": masked_mean(f_ratio, problem.gap),
        "std_ratio_data": masked_mean(ratio, problem.in_data),
        "std_ratio_gap": masked_mean(ratio, problem.gap),
    }
    if problem.task is Task.CLASSIFICATION:
        out["agreement"] = argmax_agreement(pred.mean, ref.mean)
        out["tv"] = float(total_variation(pred.mean, ref.mean).mean())
        for part, mask in (("data", problem.in_data), ("gap", problem.gap)):
            if bool(mask.any()):
                out[f"agreement_{part}"] = argmax_agreement(pred.mean[mask], ref.mean[mask])
                out[f"tv_{part}"] = float(total_variation(pred.mean[mask], ref.mean[mask]).mean())
    else:
        g = torch.Generator().manual_seed(seed)
        w2 = wasserstein_1d(pred.sample(W2_DRAWS, generator=g), ref.sample(W2_DRAWS, generator=g))
        out["w2"] = float(w2.mean())
        out["w2_gap"] = masked_mean(w2, problem.gap)
    return out


def subsample(draws: Any, outputs: Tensor, t: int, seed: int) -> Any:
    """The predictive of ``t`` of a reference's draws, chosen at random without replacement
    (all of them when it has at most ``t``); ``outputs [C, S, N, out]``."""
    from bayesify.predictive import Predictive

    flat = outputs.reshape(-1, *outputs.shape[2:])
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(flat), generator=g)[: min(t, len(flat))]
    if draws.task is Task.CLASSIFICATION:
        return Predictive.from_logits(flat[idx])
    var = (2 * draws.log_noise.reshape(-1)[idx]).exp().to(flat.dtype)
    return Predictive.regression(flat[idx, :, 0], var[:, None].expand(len(idx), flat.shape[1]))


def floor_key(name: str) -> str:
    """The metric's name in a row's floor scores."""
    return f"floor_{name}"
