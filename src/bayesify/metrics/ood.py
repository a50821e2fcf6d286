"""Out-of-distribution detection metrics from uncertainty scores.

Inputs: ``scores_in [N_in]`` on in-distribution points and ``scores_out [N_out]`` on OOD points,
where a **higher score means more likely OOD** (e.g. predictive entropy or mutual information).
Scores may be ±inf (they are only ranked) but not NaN. Results are 0-dim tensors in the scores'
float dtype; computation is in float64.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from bayesify.metrics._validate import (
    as_float,
    check_fraction,
    check_ndim,
    check_nonempty,
    out_dtype,
)
from bayesify.options import OODPositive, parse_option

__all__ = ["OODPositive", "aupr", "auroc", "fpr_at_tpr"]


def _scores(scores_in: Any, scores_out: Any) -> tuple[Tensor, Tensor, torch.dtype]:
    s_in = as_float(scores_in, "scores_in", allow_nonfinite=True)
    s_out = as_float(scores_out, "scores_out", allow_nonfinite=True).to(s_in.device)
    for t, name in ((s_in, "scores_in"), (s_out, "scores_out")):
        check_ndim(t, 1, name, "[N]")
        check_nonempty(t, name)
        if torch.isnan(t).any():
            raise ValueError(f"{name} contains NaN")
    dtype = out_dtype(s_in, s_out)
    return s_in.to(torch.float64), s_out.to(torch.float64), dtype


def auroc(scores_in: Any, scores_out: Any) -> Tensor:
    """Area under the ROC curve for telling OOD (positive) from in-distribution points.

    Equals ``P(score_out > score_in) + 1/2 P(score_out == score_in)`` (Mann-Whitney U with
    average ranks), so tied scores count one half. 0.5 = chance, 1 = perfect separation.

    Args:
        scores_in: scores of in-distribution points ``[N_in]``.
        scores_out: scores of OOD points ``[N_out]``.
    """
    s_in, s_out, dtype = _scores(scores_in, scores_out)
    n_in, n_out = s_in.numel(), s_out.numel()
    values = torch.cat([s_in, s_out])  # [N_in + N_out]
    _, inverse, counts = torch.unique(values, sorted=True, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).to(torch.float64)  # 1-based rank of each group's last member
    avg_rank = ends - (counts.to(torch.float64) - 1.0) / 2.0  # mean rank within a tie group
    rank_sum_out = avg_rank[inverse[n_in:]].sum()
    u = rank_sum_out - n_out * (n_out + 1) / 2.0
    return (u / (n_in * n_out)).to(dtype)


def aupr(scores_in: Any, scores_out: Any, positive: str = "out") -> Tensor:
    """Area under the precision-recall curve as average precision (step-wise, no interpolation).

    ``AP = sum_k (R_k - R_{k-1}) P_k`` over the distinct score thresholds, highest first (the
    definition of ``sklearn.metrics.average_precision_score``).

    Args:
        scores_in: scores of in-distribution points ``[N_in]``.
        scores_out: scores of OOD points ``[N_out]``.
        positive: ``"out"`` (default, "AUPR-Out": OOD points are positives, ranked by score) or
            ``"in"`` ("AUPR-In": in-distribution points are positives, ranked by negated score).
    """
    pos = parse_option(OODPositive, positive, option="positive")
    s_in, s_out, dtype = _scores(scores_in, scores_out)
    if pos is OODPositive.OUT:
        scores = torch.cat([s_in, s_out])
        is_pos = torch.cat([torch.zeros_like(s_in), torch.ones_like(s_out)])
    else:
        scores = -torch.cat([s_in, s_out])
        is_pos = torch.cat([torch.ones_like(s_in), torch.zeros_like(s_out)])
    order = torch.argsort(scores, descending=True)
    scores, is_pos = scores[order], is_pos[order]
    # last index of each run of tied scores = one threshold
    run_ends = torch.cat([scores[1:] != scores[:-1], scores.new_ones(1, dtype=torch.bool)])
    last = torch.nonzero(run_ends)[:, 0]
    tp = torch.cumsum(is_pos, 0)[last]
    predicted_pos = (last + 1).to(torch.float64)
    precision = tp / predicted_pos
    recall = tp / is_pos.sum()
    recall_steps = torch.diff(recall, prepend=recall.new_zeros(1))
    return (recall_steps * precision).sum().to(dtype)


def fpr_at_tpr(scores_in: Any, scores_out: Any, tpr: float = 0.95) -> Tensor:
    """False-positive rate on in-distribution data when a fraction ``tpr`` of OOD is detected.

    Points with ``score >= threshold`` are flagged OOD. The threshold is the largest one that
    flags at least ``tpr`` of the OOD points, i.e. the ``ceil(tpr * N_out)``-th largest OOD score;
    the result is the fraction of in-distribution points flagged at that threshold (ties with the
    threshold count as flagged). This is the first ROC point with TPR >= ``tpr``.

    Args:
        scores_in: scores of in-distribution points ``[N_in]``.
        scores_out: scores of OOD points ``[N_out]``.
        tpr: target true-positive rate in (0, 1]; default 0.95 (FPR95).
    """
    target = check_fraction(tpr, "tpr", low_open=True)
    s_in, s_out, dtype = _scores(scores_in, scores_out)
    n_out = s_out.numel()
    # tolerance so that e.g. 0.95 * 20 = 19.000000000000004 asks for 19, not 20, detections
    k = min(max(math.ceil(target * n_out - 1e-9), 1), n_out)
    threshold = torch.sort(s_out, descending=True).values[k - 1]
    return (s_in >= threshold).to(torch.float64).mean().to(dtype)
