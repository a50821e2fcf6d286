"""OOD detection metrics against sklearn."""

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from bayesify.metrics import aupr, auroc, fpr_at_tpr


def _scores(seed: int, tied: bool):
    rng = np.random.default_rng(seed)
    s_in, s_out = rng.normal(size=120), rng.normal(0.8, 1.2, size=70)
    if tied:  # few distinct values: many ties within and across the two sets
        s_in, s_out = np.round(s_in), np.round(s_out)
    return s_in, s_out


def _sk(s_in, s_out):
    y = np.r_[np.zeros_like(s_in), np.ones_like(s_out)]
    return y, np.r_[s_in, s_out]


@pytest.mark.parametrize("tied", [False, True])
def test_auroc_matches_sklearn(tied):
    s_in, s_out = _scores(1, tied)
    y, s = _sk(s_in, s_out)
    assert auroc(torch.tensor(s_in), torch.tensor(s_out)).item() == pytest.approx(
        roc_auc_score(y, s), abs=1e-12
    )


def test_auroc_ties_count_half_and_extremes():
    assert auroc([1.0, 1.0], [1.0, 1.0]).item() == 0.5
    assert auroc([0.0, 1.0], [1.0, 2.0]).item() == pytest.approx(0.875)  # 3 wins + 1 tie of 4
    assert auroc([0.0, 0.1], [5.0, float("inf")]).item() == 1.0
    assert auroc([5.0, 6.0], [0.0, 1.0]).item() == 0.0


@pytest.mark.parametrize("tied", [False, True])
def test_aupr_matches_sklearn_average_precision(tied):
    s_in, s_out = _scores(2, tied)
    y, s = _sk(s_in, s_out)
    assert aupr(s_in, s_out).item() == pytest.approx(average_precision_score(y, s), abs=1e-12)
    assert aupr(s_in, s_out, positive="in").item() == pytest.approx(
        average_precision_score(1 - y, -s), abs=1e-12
    )


def _fpr_from_roc(s_in, s_out, tpr):
    y, s = _sk(s_in, s_out)
    fpr_curve, tpr_curve, _ = roc_curve(y, s, drop_intermediate=False)
    return fpr_curve[np.argmax(tpr_curve >= tpr - 1e-12)]


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("tpr", [0.5, 0.8, 0.95, 1.0])
def test_fpr_at_tpr_matches_roc_curve(tied, tpr):
    s_in, s_out = _scores(3, tied)
    ours = fpr_at_tpr(s_in, s_out, tpr=tpr).item()
    assert ours == pytest.approx(_fpr_from_roc(s_in, s_out, tpr), abs=1e-12)


def test_fpr_at_tpr_hand_example():
    s_out = np.arange(1.0, 21.0)  # 20 OOD points: 95% = 19 detections -> threshold 2
    s_in = np.array([0.0, 1.5, 2.0, 3.0])  # 2.0 and 3.0 are flagged (ties count as flagged)
    assert fpr_at_tpr(s_in, s_out).item() == pytest.approx(0.5)
    assert fpr_at_tpr(s_in, s_out, tpr=1.0).item() == pytest.approx(0.75)


def test_dtype_follows_scores():
    s = torch.randn(10)
    assert auroc(s, s + 1).dtype == torch.float32
    assert aupr(s.double(), s.double()).dtype == torch.float64
