"""Bad input raises ValueError naming the argument and the problem."""

import math

import pytest
import torch

from bayesify import metrics as M
from bayesify.metrics import Reduction

NAN = float("nan")
INF = float("inf")
Y3 = [0.0, 1.0, 2.0]
P3 = [[0.2, 0.8], [0.5, 0.5], [1.0, 0.0]]
L3 = [1, 0, 0]


def test_metrics_import_nothing_else_from_bayesify():
    import ast
    import pathlib

    for path in pathlib.Path(M.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                mod = node.module
                ok = not mod.startswith("bayesify") or mod.startswith("bayesify.metrics")
                ok = ok or mod == "bayesify.options"  # the option Enums, below every layer
                assert ok, f"{path.name} imports {mod}"


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: M.rmse([1.0, 2.0], Y3), "mean and y must have the same shape"),
        (lambda: M.rmse([[1.0, 2.0, 3.0]], Y3), r"mean must have shape \[N\]"),
        (lambda: M.rmse([], []), "y is empty"),
        (lambda: M.rmse([NAN, 0.0, 0.0], Y3), "mean contains NaN"),
        (lambda: M.crps_gaussian(Y3, 1.0, [0.0, INF, 0.0]), "y contains inf"),
        (lambda: M.crps_gaussian(Y3, [1.0, 0.0, 1.0], Y3), "std must be > 0"),
        (lambda: M.crps_gaussian(Y3, -1.0, Y3), "std must be > 0"),
        (lambda: M.crps_gaussian(Y3, [1.0, 1.0], Y3), "std must be a scalar or"),
        (lambda: M.gaussian_log_prob(Y3, 0.0, Y3), "var must be > 0"),
        (lambda: M.gaussian_log_prob(Y3, "a", Y3), "var could not be converted"),
        (lambda: M.crps_gaussian(Y3, True, Y3), "std must be real-valued"),
        (lambda: M.mixture_log_prob(Y3, 1.0, Y3), r"means must have shape \[T, N\]"),
        (lambda: M.mixture_log_prob([[0.0, 1.0]], 1.0, Y3), "disagree on N"),
        (lambda: M.mixture_log_prob([Y3, Y3], [[1.0] * 3] * 3, Y3), "var must be a scalar"),
        (lambda: M.crps_mixture([Y3], -0.1, Y3), "std must be >= 0"),
        (lambda: M.crps_samples([[NAN] * 3], Y3), "samples contains NaN"),
        (lambda: M.crps_gaussian(Y3, 1.0, Y3, reduction="avg"), "unknown reduction 'avg'; valid"),
        (lambda: M.fit_constant_std(Y3, Y3, "mse"), "unknown objective 'mse'; valid: crps, pll"),
        (lambda: M.normalized_pll(1.0, 2.0, 2.0), "pll_optimal and pll_constant have the same"),
        (lambda: M.normalized_crps([], 1.0, 0.0), "crps is empty"),
        (lambda: M.interval_coverage(Y3, 1.0, Y3, level=1.5), r"level must be in \[0, 1\]"),
        (lambda: M.miscalibration_area(Y3, 1.0, Y3, levels=[0.5, 2.0]), "levels must lie in"),
        (lambda: M.nll([[0.2, 0.9]], [0]), "probs must sum to 1"),
        (lambda: M.nll([[-0.2, 1.2]], [0]), r"probs must be probabilities in \[0, 1\]"),
        (lambda: M.nll([0.2, 0.8], [0]), r"probs must have shape \[N, C\]"),
        (lambda: M.nll(P3, [1, 0]), "disagree on N"),
        (lambda: M.nll(P3, [1, 0, 2]), r"labels must lie in \[0, 2\)"),
        (lambda: M.nll(P3, [1, 0, -1]), r"labels must lie in \[0, 2\)"),
        (lambda: M.nll(P3, [1.0, 0.5, 0.0]), "labels must be integer class indices"),
        (lambda: M.nll(P3, [True, False, False]), "labels must be integer class indices"),
        (lambda: M.brier_score([[NAN, 1.0]], [0]), "probs contains NaN"),
        (lambda: M.expected_calibration_error(P3, L3, n_bins=0), "n_bins must be an integer"),
        (lambda: M.reliability_curve(P3, L3, n_bins=2.5), "n_bins must be an integer"),
        (lambda: M.entropy([0.3, 0.3]), "probs must sum to 1"),
        (lambda: M.mutual_information(P3), r"sample_probs must have shape \[T, N, C\]"),
        (lambda: M.auroc([0.0, NAN], [1.0]), "scores_in contains NaN"),
        (lambda: M.auroc([0.0], []), "scores_out is empty"),
        (lambda: M.auroc([[0.0]], [1.0]), r"scores_in must have shape \[N\]"),
        (lambda: M.aupr([0.0], [1.0], positive="ood"), "unknown positive 'ood'; valid: out, in"),
        (lambda: M.fpr_at_tpr([0.0], [1.0], tpr=0.0), r"tpr must be in \(0, 1\]"),
        (lambda: M.fpr_at_tpr([0.0], [1.0], tpr=NAN), "tpr must be in"),
        (lambda: M.aurc([0.1, 0.2], [1.0]), "uncertainty and loss must have the same shape"),
        (lambda: M.aurc([0.1, NAN], [1.0, 0.0]), "uncertainty contains NaN"),
        (lambda: M.risk_coverage_curve([0.1, 0.2], [1.0, INF]), "loss contains inf"),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_reduction_enum_and_strings_agree():
    mean, std, y = torch.randn(4), torch.rand(4) + 0.5, torch.randn(4)
    none = M.crps_gaussian(mean, std, y, reduction=Reduction.NONE)
    assert none.shape == (4,)
    assert M.crps_gaussian(mean, std, y, reduction="sum").item() == pytest.approx(none.sum().item())
    assert M.crps_gaussian(mean, std, y).item() == pytest.approx(none.mean().item())
    assert Reduction("mean") is Reduction.MEAN and Reduction.SUM == "sum"


def test_probability_tolerance_accepts_float32_softmax():
    probs = torch.softmax(torch.randn(50, 1000) * 5, dim=1)  # float32, many classes
    assert math.isfinite(M.nll(probs, torch.zeros(50, dtype=torch.long)).item())
    assert M.entropy(probs.half()).shape == (50,)
