"""`bench images`: corruptions, the scores of one job, and a tiny end-to-end run into a store
(real Fashion-MNIST / MNIST files; skipped without the shared data)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bayesify.bench.images import command as images
from bayesify.bench.images import jobs as ij
from bayesify.bench.images.scores import COVERAGE_GRID, coverage_scores, ood_scores
from bayesify.data.corruptions import gaussian_mix, salt_and_pepper
from bayesify.metrics import calibration_error_of_curve, expected_calibration_error
from bayesify.metrics import reliability_curve as curve_of
from bayesify.predictive import Predictive


def test_gaussian_mix_is_the_convex_combination_with_standard_noise():
    x = torch.rand(50, 1, 4, 4)
    before = x.clone()
    eps = torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
    for gamma in (0.0, 0.3, 1.0):
        out = gaussian_mix(x, gamma, generator=torch.Generator().manual_seed(3))
        torch.testing.assert_close(out, (1 - gamma) * x + gamma * eps)
    assert torch.equal(x, before)
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\], got 1.5"):
        gaussian_mix(x, 1.5)


def test_salt_and_pepper_replaces_a_fraction_p_half_black_half_white():
    x = torch.full((200, 1, 28, 28), 0.5)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(salt_and_pepper(x, 0.0, generator=g), x)
    everything = salt_and_pepper(x, 1.0, low=-1.0, high=2.0, generator=g)
    assert set(everything.unique().tolist()) == {-1.0, 2.0}
    out = salt_and_pepper(x, 0.2, generator=g)
    changed = out != 0.5
    n = changed.numel()
    # binomial: 0.2 ± 5 standard errors
    assert abs(changed.float().mean().item() - 0.2) < 5 * math.sqrt(0.2 * 0.8 / n)
    white = (out[changed] == 1.0).float().mean().item()
    k = changed.sum().item()
    assert abs(white - 0.5) < 5 * math.sqrt(0.25 / k)
    assert set(out[changed].unique().tolist()) == {0.0, 1.0}


def test_calibration_error_of_a_curve_equals_the_ece():
    g = torch.Generator().manual_seed(1)
    probs = torch.softmax(3 * torch.randn(500, 10, generator=g), -1)
    labels = torch.randint(0, 10, (500,), generator=g)
    for bins in (1, 7, 15):
        curve = curve_of(probs, labels, n_bins=bins)
        want = expected_calibration_error(probs, labels, n_bins=bins).item()
        assert calibration_error_of_curve(curve).item() == pytest.approx(want, rel=1e-5)


def test_coverage_scores_match_a_sorted_reference():
    g = torch.Generator().manual_seed(2)
    probs = torch.softmax(2 * torch.randn(4, 300, 5, generator=g), -1)  # [T, N, C]
    y = torch.randint(0, 5, (300,), generator=g)
    pred = Predictive.classification(probs)
    got = coverage_scores(pred, y)
    wrong = (pred.mean.argmax(-1) != y).numpy().astype(float)
    for name, u in (("entropy", pred.entropy), ("mi", pred.mutual_information)):
        order = np.argsort(u.numpy(), kind="stable")  # scores are continuous: no ties
        ref = [wrong[order[: round(c * 300)]].mean() for c in COVERAGE_GRID]
        np.testing.assert_allclose(got[name]["error"], ref, rtol=1e-12)
        assert got[name]["error"][-1] == pytest.approx(wrong.mean())


def test_ood_scores_match_sklearn_for_every_score():
    from sklearn.metrics import average_precision_score, roc_auc_score

    g = torch.Generator().manual_seed(0)
    p_in = Predictive.from_logits(4 * torch.randn(5, 30, 4, generator=g))
    p_out = Predictive.from_logits(torch.randn(5, 20, 4, generator=g))
    extra_in, extra_out = (
        {"mahalanobis": torch.rand(30, generator=g)},
        {"mahalanobis": torch.rand(20, generator=g) + 0.3},
    )
    out = ood_scores(p_in, p_out, extra_in, extra_out)
    assert set(out) == {"max_prob", "max_logit", "energy", "entropy", "mutual_information",
                        "mahalanobis"}  # fmt: skip
    truth = np.r_[np.zeros(30), np.ones(20)]
    for name, m in out.items():
        s_in = extra_in[name] if name in extra_in else p_in.ood_score(name)
        s_out = extra_out[name] if name in extra_out else p_out.ood_score(name)
        both = np.r_[s_in.numpy(), s_out.numpy()]
        assert m["auroc"] == pytest.approx(roc_auc_score(truth, both))
        assert m["aupr"] == pytest.approx(average_precision_score(truth, both), abs=0.02)
        assert m["mean_out"] == pytest.approx(float(s_out.double().mean()))
    probs = Predictive.classification(p_in.samples)  # no logits: no logit scores
    assert "energy" not in ood_scores(probs, probs)


def test_ood_section_shows_each_methods_default_and_best_score():
    from bayesify.bench.images.report import ood_section

    def row(**auroc):  # a stored row's OOD metrics (older rows name MI "mi")
        return {"ood": {k: {"auroc": v, "aupr": 0.5, "fpr95": 0.5} for k, v in auroc.items()}}

    methods = {
        "deterministic": [row(max_prob=0.80, entropy=0.82, mi=0.5, expected_entropy=0.7)],
        "mcbn": [row(max_prob=0.81, energy=0.90, entropy=0.83, mutual_information=0.86)],
    }
    text = "\n".join(ood_section("lenet", methods))
    assert "| deterministic | 1 − max prob | 0.8000 | entropy | 0.8200 |" in text
    assert "| mcbn | MI | 0.8600 | energy | 0.9000 |" in text
    # equal samples (closed-form probabilities): read by entropy, not by its zero MI
    closed = {"laplace-torch": [row(max_prob=0.80, entropy=0.85, mutual_information=0.55)]}
    assert "| laplace-torch | entropy | 0.8500 | entropy | 0.8500 |" in "\n".join(
        ood_section("lenet", closed)
    )
    assert "| 1 − max prob | energy | entropy | MI |" in text  # scores some method gives
    # one seed: no error bar, so the higher mean is not called a win
    assert (
        "mcbn (MI, 0.8600), is above, on the mean, the deterministic baseline (1 − max prob, "
        "0.8000)" in text
    )
    # two seeds: "beats" only when the gap exceeds the two standard errors combined
    wide = {m: [*rows, row(max_prob=0.60, entropy=0.82, mutual_information=0.60)]
            for m, rows in methods.items()}  # fmt: skip
    assert "is above, on the mean, the deterministic" in "\n".join(ood_section("lenet", wide))
    tight = {m: [*rows, rows[0]] for m, rows in methods.items()}
    assert "beats, by more than the two standard errors combined, the deterministic" in "\n".join(
        ood_section("lenet", tight)
    )


def test_the_verdict_names_the_score_the_deterministic_baseline_was_read_by():
    from bayesify.bench.images.report import ood_section

    def row(**auroc):
        return {"ood": {k: {"auroc": v} for k, v in auroc.items()}}

    # rows without 1 − max prob: the deterministic network is read by its entropy
    methods = {"deterministic": [row(entropy=0.82)], "mcbn": [row(mutual_information=0.86)]}
    text = "\n".join(ood_section("lenet", methods))
    assert "the deterministic baseline (entropy, 0.8200)" in text and "max prob" not in text


def test_a_density_score_is_scored_as_the_predictive_scores_are():
    """DDU's density joins a job's OOD and coverage results: fed the entropy as its score, it
    gives exactly the entropy's entries."""
    g = torch.Generator().manual_seed(3)
    p_in = Predictive.classification(torch.softmax(torch.randn(1, 200, 4, generator=g), -1))
    p_out = Predictive.classification(torch.softmax(torch.randn(1, 90, 4, generator=g) / 3, -1))
    y = torch.randint(0, 4, (200,), generator=g)
    e_in, e_out = p_in.ood_score("entropy"), p_out.ood_score("entropy")
    ood = ood_scores(p_in, p_out, {"density": e_in}, {"density": e_out})
    assert ood["density"] == ood["entropy"]
    coverage = coverage_scores(p_in, y, {"density": e_in})
    assert coverage["density"] == coverage["entropy"]


def test_digits_are_upsampled_into_mnists_box_and_normalised_like_it():
    from bayesify.bench.images.digits import load_digits_ood, to_mnist_format
    from bayesify.data import FASHION_MNIST_MEAN as MEAN
    from bayesify.data import FASHION_MNIST_STD as STD

    x = to_mnist_format(torch.full((2, 8, 8), 16.0))  # white: 1 in the 20×20 box, 0 around
    assert x.shape == (2, 1, 28, 28) and x.dtype == torch.float32
    raw = x * STD + MEAN
    torch.testing.assert_close(raw[:, :, 4:24, 4:24], torch.ones(2, 1, 20, 20))
    raw[:, :, 4:24, 4:24] = 0
    torch.testing.assert_close(raw, torch.zeros(2, 1, 28, 28))
    one = torch.zeros(1, 8, 8)
    one[0, 0, 7] = 16.0  # the top-right pixel lands in the box's top-right 2.5×2.5 corner
    peak = (to_mnist_format(one)[0, 0] * STD + MEAN).argmax()
    assert (int(peak) // 28, int(peak) % 28) in {(r, c) for r in (4, 5, 6) for c in (21, 22, 23)}
    every = load_digits_ood()
    assert every.shape == (1797, 1, 28, 28)
    assert every.min() >= -MEAN / STD - 1e-6 and every.max() <= (1 - MEAN) / STD + 1e-6
    part = load_digits_ood(100, seed=1)  # a subset: rows of the whole set, in order
    hits = [int(((every - row).abs().amax((1, 2, 3)) == 0).nonzero()[0]) for row in part[:5]]
    assert len(part) == 100 and hits == sorted(hits)


def test_summary_states_the_single_pass_target_and_laplace_check_with_errors():
    from bayesify.bench.images.report import SCORE_LABELS
    from bayesify.bench.images.report_summary import cell, summary_section

    def row(ratio, **auroc):
        ood = {k: {"auroc": v} for k, v in auroc.items()}
        return {"error": 0.1, "ood": ood, "ood_digits": ood, "timed_ms_per_1000": 10 * ratio,
                "det_ms_per_1000": 10.0, "time_ratio": ratio}  # fmt: skip

    methods = {
        "deterministic": [row(1.0, max_prob=0.80, entropy=0.81)] * 3,
        "ensemble": [row(3.0, max_prob=0.8, mutual_information=a) for a in (0.90, 0.91, 0.92)],
        "sngp": [row(1.1, mutual_information=a) for a in (0.90, 0.905, 0.91)],
        "batch-ensemble": [row(2.0, mutual_information=0.95)] * 3,  # too slow to count
        "laplace": [row(1.0, entropy=0.85, mutual_information=m) for m in (0.80, 0.81, 0.82)],
    }
    text = "\n".join(summary_section("lenet", methods, SCORE_LABELS))
    assert "| sngp | 3 | yes | 0.1000 ± 0.0000 | 0.9050 ± 0.0029 (MI) |" in text
    assert "best sampling method ensemble 0.9100 ± 0.0058" in text
    assert "**met** by sngp 0.9050 ± 0.0029 (gap -0.0050, time ratio 1.10 ± 0.00)" in text
    assert "the others: batch-ensemble 0.9500" in text
    assert "paired over 3 seed(s): -0.0400 ± 0.0058 (MI below entropy), within 0.05" in text
    for mi, verdict in (
        (0.95, "more than 0.05 above it on the mean: MI is the better"),
        (0.75, "**more than 0.05 below** it on the mean"),
    ):
        methods["laplace"] = [row(1.0, entropy=0.85, mutual_information=mi)] * 3
        assert verdict in "\n".join(summary_section("lenet", methods, SCORE_LABELS))
    assert cell([1.0, 2.0, 4.0]) == f"2.3333 ± {np.std([1, 2, 4], ddof=1) / math.sqrt(3):.4f}"
    one = "\n".join(summary_section("lenet", {k: v[:1] for k, v in methods.items()},
                                      SCORE_LABELS))  # fmt: skip
    assert "nan" not in one and "best sampling method ensemble 0.9000 (one seed)" in one
    methods["sngp"] = [row(1.4, mutual_information=0.9)]
    text = "\n".join(summary_section("lenet", methods, SCORE_LABELS))
    assert "deterministic time, on the means) **not met**; the others: batch" in text


@pytest.mark.parametrize("model", ij.MODELS)
def test_every_paper_method_trains_and_samples_on_both_models(model):
    """The paper preset is too long to run in tests: each of its methods builds on each model,
    takes a training step and draws samples ``[T, N, C]`` that differ across T."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 1, 28, 28, generator=g), torch.randint(0, 10, (16,), generator=g)
    for method in ij.METHODS:
        from_another_net = ("mcbn", "ensemble", *ij.TTA_OVER, "swag", "multiswag")
        if method in from_another_net or method.startswith("laplace"):  # (the tiny run)
            continue
        job = ij.ImagesJob(method, ij.DATASET, 0, 0, model=model)  # members: 3
        if (model, method) in ij.UNSUPPORTED:  # refused by the method, skipped by the command
            with pytest.raises(ValueError, match="nn.Sequential"):
                ij._build(method, job)
            continue
        m = ij._build(method, job)
        m.fit((x, y), epochs=1, batch_size=16, progress=False)
        samples = m.predict(x[:4], samples=4, seed=0).samples
        t = 3 if method in ("batch-ensemble", "packed-ensemble") else 4  # T = M = 3
        assert samples.shape == (t, 4, 10), method
        deterministic = method in ("deterministic", "ddu")
        assert deterministic == bool((samples == samples[0]).all()), method


def test_swag_and_multiswag_start_from_the_deterministic_network():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(48, 1, 28, 28, generator=g), torch.randint(0, 10, (48,), generator=g)
    data = {"train": (x[:32], y[:32]), "val": (x[32:], y[32:])}
    for method, members in (("swag", 1), ("multiswag", 2)):
        job = ij.ImagesJob(method, ij.DATASET, 0, 0, epochs=1, batch_size=16, members=2)
        m, info = ij._method(job, data, None)
        assert m.net.counts.tolist() == [2 * ij.SWAG_EPOCHS] * members
        assert info["swag_seconds"] > 0
        samples = m.predict(x[:3], samples=2, seed=0).samples
        assert samples.shape == (2, 3, 10) and (samples != samples[0]).any()


def test_overrides_reach_every_job_and_bad_values_are_refused():
    opts = images.ImagesOptions(epochs=30, patience=3, members=4)
    jobs = opts.jobs()
    assert {(j.epochs, j.patience, j.members) for j in jobs} == {(30, 3, 4)}
    quick = ij.PRESETS["quick"]
    default = images.ImagesOptions().jobs()
    assert {(j.patience, j.members) for j in default} == {(quick.patience, quick.members)}
    with pytest.raises(ValueError, match="--patience"):
        images.ImagesOptions(patience=-1)


def test_sngp_is_built_on_the_lenet_without_batch_norm():
    """On the batch-norm LeNet SNGP did not train (validation loss log 10 for 5 epochs, 3 seeds
    of images_seeds.md's first run), so its LeNet has no batch norm; the deterministic one has."""
    from torch import nn

    job = ij.ImagesJob("sngp", ij.DATASET, 0, 0)
    norms = (nn.BatchNorm1d, nn.BatchNorm2d)
    assert not any(isinstance(m, norms) for m in ij._build("sngp", job).net.modules())
    assert any(isinstance(m, norms) for m in ij._build("deterministic", job).net.modules())
