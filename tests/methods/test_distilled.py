"""Distilled students: the shared suite, the Dirichlet maths against scipy, the student's
summaries against its teacher's on a tiny problem, and bundles that record the teacher."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import torch
from conformance import MethodConformance
from scipy.special import digamma
from test_mcbn import regression_data

import bayesify
from bayesify.methods.distillation.distill import classification_loss, transfer_inputs
from bayesify.models import lenet, mlp
from bayesify.options import Augment
from bayesify.predictive.dirichlet import (
    dirichlet_nll,
    dirichlet_summaries,
    fit_dirichlet,
    sample_dirichlet,
)


def blobs(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Three overlapping Gaussian classes in the first 2 of 4 features (2 of noise)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    centres = torch.tensor([[0.0, 1.5, 0, 0], [-1.3, -0.8, 0, 0], [1.3, -0.8, 0, 0]])
    return centres[y] + 0.8 * torch.randn(n, 4, generator=g), y


def sine(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=g) * 6 - 3
    return x, torch.sin(2 * x[:, 0]) + 0.2 * torch.randn(n, generator=g)


class TestDistilledClassification(MethodConformance):
    def make(self):
        x, y = blobs(300)
        teacher = bayesify.MCDropout(mlp(4, 3, (16,), norm=None, dropout=0.2),
                                     task="classification")  # fmt: skip
        teacher.fit((x, y), epochs=5, batch_size=32, lr=1e-2, progress=False)
        return bayesify.distill(teacher, x, epochs=2, samples=8, progress=False), x[:20]


class TestDistilledRegression(MethodConformance):
    def make(self):
        x, y = regression_data()
        teacher = bayesify.MCDropout(mlp(5, 1, (16,), norm=None, dropout=0.2))
        teacher.fit((x[:200], y[:200]), val=(x[200:], y[200:]), epochs=5, lr=1e-2,
                    progress=False)  # fmt: skip
        return bayesify.distill(teacher, x[:200], epochs=2, samples=8, progress=False), x[200:220]


class TestDistilledLeNet(MethodConformance):
    """An image teacher whose dropout sits before the last linear layer (inserted by surgery):
    the student is the LeNet rebuilt from its spec, started from the teacher's weights."""

    def make(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(48, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (48,), generator=g)
        teacher = bayesify.MCDropout(lenet(norm="batch"), task="classification", dropout=0.5,
                                     where="before-last-linear")  # fmt: skip
        teacher.fit((x, y), epochs=1, batch_size=16, progress=False)
        return bayesify.distill(teacher, x, epochs=1, samples=4, progress=False), x[:6]


# ---------------------------------------------------------------------------- Dirichlet maths
def test_fit_dirichlet_recovers_known_concentrations():
    """Maximum likelihood from 4,000 draws of scipy's Dirichlet: within 5 % of the truth, and
    at least as likely under scipy's logpdf as the truth (it is the maximiser)."""
    rng = np.random.default_rng(0)
    truths = [np.array([2.0, 5.0, 0.7]), np.array([30.0, 10.0, 60.0, 5.0])]
    for alpha in truths:
        draws = scipy.stats.dirichlet(alpha).rvs(4000, random_state=rng)  # [T, C]
        fit = fit_dirichlet(torch.as_tensor(draws).unsqueeze(1))[0].numpy()
        np.testing.assert_allclose(fit, alpha, rtol=0.05)
        ll = lambda a, d=draws: scipy.stats.dirichlet(a).logpdf(d.T).sum()  # noqa: E731
        assert ll(fit) >= ll(alpha)


def test_dirichlet_nll_is_scipys_logpdf():
    rng = np.random.default_rng(1)
    alpha = np.array([[1.5, 3.0, 0.5], [8.0, 2.0, 4.0]])
    draws = np.stack([scipy.stats.dirichlet(a).rvs(6, random_state=rng) for a in alpha], 1)
    mean_log = torch.as_tensor(np.log(draws).mean(0))  # [N, C]
    got = dirichlet_nll(torch.as_tensor(alpha).log(), mean_log)
    want = -np.mean([scipy.stats.dirichlet(a).logpdf(draws[:, i].T).mean()
                     for i, a in enumerate(alpha)])  # fmt: skip
    assert float(got) == pytest.approx(want, rel=1e-10)


def test_closed_form_summaries_match_scipy_and_draws():
    alpha = torch.tensor([[2.0, 5.0, 0.7], [40.0, 1.0, 1.0]], dtype=torch.float64)
    s = dirichlet_summaries(alpha)
    for i, a in enumerate(alpha.numpy()):
        d = scipy.stats.dirichlet(a)
        np.testing.assert_allclose(s["mean"][i].numpy(), d.mean(), rtol=1e-12)
        np.testing.assert_allclose(s["epistemic_variance"][i].numpy(), d.var(), rtol=1e-12)
        m, a0 = a / a.sum(), a.sum()  # E[H(p)] by Malinin & Gales (2018), eq. 12
        expected = digamma(a0 + 1) - (m * digamma(a + 1)).sum()
        assert float(s["expected_entropy"][i]) == pytest.approx(expected, rel=1e-12)
    # Monte Carlo: the Predictive of 20,000 draws converges to the closed forms
    pred = bayesify.Predictive.classification(
        sample_dirichlet(alpha, 20000, torch.Generator().manual_seed(0))
    )
    torch.testing.assert_close(pred.mean, s["mean"], atol=5e-3, rtol=0)
    torch.testing.assert_close(pred.expected_entropy, s["expected_entropy"], atol=5e-3, rtol=0)
    torch.testing.assert_close(pred.mutual_information, s["mutual_information"], atol=5e-3,
                               rtol=0)  # fmt: skip


def test_classification_loss_parts():
    """At temperature 1: the cross-entropy of the student's mean to the teacher's mean class
    probabilities plus the Dirichlet NLL of the (smoothed) samples; the mean head gets the
    cross-entropy's gradient only, and a higher temperature changes the Dirichlet term only."""
    g = torch.Generator().manual_seed(0)
    log_p = torch.log_softmax(3 * torch.randn(4, 5, 3, generator=g), -1)
    out = torch.randn(4, 4, generator=g, requires_grad=True)
    z = torch.log_softmax(out[:, :3].double(), -1)
    ce = -(log_p.double().exp().mean(1) * z).sum(-1).mean()
    q = 0.9999 * log_p.double().exp() + 1e-4 / 3
    want = ce + dirichlet_nll(z + out[:, 3:].double(), q.log().mean(1))
    got = classification_loss(out, log_p, 1.0)
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    (grad,) = torch.autograd.grad(got, out)
    (want_grad,) = torch.autograd.grad(ce, out)
    torch.testing.assert_close(grad[:, :3], want_grad[:, :3].float())
    (hot,) = torch.autograd.grad(classification_loss(out, log_p, 10.0), out)
    torch.testing.assert_close(hot[:, :3], grad[:, :3])
    assert not torch.allclose(hot[:, 3], grad[:, 3])


def test_transfer_inputs():
    x = torch.randn(10, 3)
    g = torch.Generator().manual_seed(0)
    mix = transfer_inputs(x, Augment.MIXUP, 2, 0.1, g)
    assert mix.shape == (30, 3) and torch.equal(mix[:10], x)
    lo, hi = x.min(0).values, x.max(0).values  # blends stay inside the inputs' box
    assert ((mix >= lo - 1e-6) & (mix <= hi + 1e-6)).all()
    assert transfer_inputs(x, Augment.NONE, 3, 0.1, g).shape == (10, 3)
    noisy = transfer_inputs(x, Augment.NOISE, 1, 0.1, g)
    assert 0.05 < float((noisy[10:] - x).std()) < 0.2


# ---------------------------------------------------------------------------- student vs teacher
def test_classification_student_matches_teacher_summaries():
    """On the training inputs of a tiny problem: the student's class probabilities, expected
    entropy and mutual information are close to the teacher's (T = 400 samples each), and the
    per-input epistemic scores rank alike."""
    torch.manual_seed(0)
    x, y = blobs(400)
    teacher = bayesify.MCDropout(mlp(4, 3, (32, 32), norm=None, dropout=0.3),
                                 task="classification")  # fmt: skip
    teacher.fit((x, y), epochs=20, batch_size=32, lr=1e-2, progress=False)
    student = bayesify.distill(teacher, x, samples=64, epochs=40, lr=3e-3, progress=False)
    t = teacher.predict(x, samples=400, seed=0)
    s = student.summaries(x)
    assert float((t.mean - s["mean"]).abs().sum(-1).mean()) < 0.12  # mean L1 of probabilities
    assert float((t.expected_entropy - s["expected_entropy"]).abs().mean()) < 0.08
    assert float((t.mutual_information - s["mutual_information"]).abs().mean()) < 0.05
    rho = scipy.stats.spearmanr(t.mutual_information, s["mutual_information"]).statistic
    assert rho > 0.6
    # the Predictive of T draws agrees with the closed forms it estimates
    p = student.predict(x, samples=2000, seed=1)
    torch.testing.assert_close(p.mean, s["mean"].float(), atol=0.02, rtol=0)


def test_regression_student_matches_teacher_and_its_predictive_is_exact():
    torch.manual_seed(0)
    x, y = sine(300)
    teacher = bayesify.MCDropout(mlp(1, 1, (64, 64), norm=None, dropout=0.2))
    teacher.fit((x, y), val=sine(100, 1), epochs=60, lr=3e-3, progress=False)
    student = bayesify.distill(teacher, x, samples=64, epochs=80, progress=False)
    t = teacher.predict(x, samples=400, seed=0)
    s = student.summaries(x)
    assert float((t.mean - s["mean"]).abs().mean()) < 0.1 * float(t.std.mean())
    assert float(s["aleatoric_variance"].mean()) == pytest.approx(teacher.noise_variance, rel=0.1)
    ratio = float(s["epistemic_variance"].mean() / t.epistemic_variance.mean())
    assert 0.6 < ratio < 1.6
    # T >= 2 draws: the Predictive's mean and variances are the heads exactly
    p = student.predict(x, samples=5, seed=0)
    torch.testing.assert_close(p.mean, s["mean"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(p.epistemic_variance, s["epistemic_variance"], rtol=1e-4,
                               atol=1e-7)  # fmt: skip
    torch.testing.assert_close(p.aleatoric_variance, s["aleatoric_variance"], rtol=1e-6, atol=0)


def test_bundle_records_teacher_and_leaves_its_calibrations(tmp_path):
    x, y = blobs(200)
    teacher = bayesify.MCDropout(mlp(4, 3, (8,), norm=None, dropout=0.2), task="classification")
    teacher.fit((x, y), epochs=2, progress=False)
    teacher.metadata.update({"deferral": {"score": "mi"}, "data": "blobs"})
    student = bayesify.distill(teacher, (x, y), epochs=1, samples=4, augment="noise", copies=1,
                               progress=False, teacher_source="teacher/")  # fmt: skip
    assert student.metadata == {"data": "blobs"}  # the teacher's deferral is not the student's
    student.save(tmp_path / "s")
    loaded = bayesify.load(tmp_path / "s")
    assert isinstance(loaded, bayesify.Distilled)
    d = loaded.distillation
    assert d["teacher"]["method"] == "mc-dropout" and d["teacher"]["source"] == "teacher/"
    assert len(d["teacher"]["config_hash"]) == len(d["teacher"]["weights_hash"]) == 16
    assert d["transfer"] == {"inputs": 200, "augment": "noise", "copies": 1, "noise": 1.0,
                             "rows": 400}  # fmt: skip
    for k, v in student.summaries(x).items():
        torch.testing.assert_close(loaded.summaries(x)[k], v)


def test_ensemble_teacher_and_bad_arguments():
    x, y = blobs(120)
    teacher = bayesify.DeepEnsemble(mlp(4, 3, (8,), norm=None), members=3, task="classification")
    teacher.fit((x, y), epochs=2, progress=False)
    student = bayesify.distill(teacher, x, epochs=1, samples=6, progress=False)
    assert student.distillation["teacher"]["method"] == "ensemble"
    assert student.predict(x[:5], samples=3).samples.shape == (3, 5, 3)
    with pytest.raises(ValueError, match="augment"):
        bayesify.distill(teacher, x, augment="rotate")
    with pytest.raises(ValueError, match="samples"):
        bayesify.distill(teacher, x, samples=0)
    with pytest.raises(ValueError, match="distilled student already"):
        bayesify.distill(student, x)


def test_adaptive_rounds_draw_without_running_the_network_again():
    """Adaptive sampling's rounds reuse one pass over the rows; their draws are those of
    ``sample(x[rows])`` with the same generator, and ``predict(samples="adaptive")`` works."""
    x, y = blobs(100)
    teacher = bayesify.MCDropout(mlp(4, 3, (8,), norm=None, dropout=0.2), task="classification")
    teacher.fit((x, y), epochs=2, progress=False)
    student = bayesify.distill(teacher, x, epochs=2, samples=4, progress=False)
    rows = torch.tensor([3, 7, 11])
    draw = student._prefix_sampler(x, torch.Generator().manual_seed(0), None)
    calls = []
    hook = student.net.register_forward_pre_hook(lambda *_: calls.append(1))
    got = draw(rows, 8)
    hook.remove()
    want = student.sample(x[rows], 8, generator=torch.Generator().manual_seed(0))
    assert not calls
    # the same draws; the network's outputs may differ in the last float32 bit, since one
    # pass over 100 rows and one over 3 rows may sum in another order (threads, BLAS blocks)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    pred = student.predict(x[:10], samples="adaptive", tol=0.01, start=4, max_samples=16, seed=0)
    assert len(pred) == 10


def test_sequential_deferral_runs_the_student_once():
    """A student served with a sequential deferral decision: its rounds draw from the one pass
    over the rows (the network runs for the served samples and once more for all rounds, not
    once per round), and the decision is that of drawing each round with ``sample``."""
    from bayesify.posthoc.deferral import DeferralPolicy
    from bayesify.posthoc.sequential import SequentialDecision
    from bayesify.predictor import Predictor

    x, y = blobs(200)
    teacher = bayesify.MCDropout(mlp(4, 3, (8,), norm=None, dropout=0.3), task="classification")
    teacher.fit((x, y), epochs=3, progress=False)
    student = bayesify.distill(teacher, x, epochs=2, samples=8, progress=False)
    predictor = Predictor(student)
    policy = DeferralPolicy.fit_sequential(
        predictor.draw(x.numpy(), seed=0),
        y,
        score="mi",
        target_coverage=0.5,
        decision=SequentialDecision(start=4, max_samples=256),
    )
    policy.store(student.metadata)
    calls = []
    hook = student.net.register_forward_pre_hook(lambda *_: calls.append(1))
    res = predictor.predict(x[:40].numpy(), samples=4, seed=1)
    hook.remove()
    assert res.columns["defer_samples"].max() >= 32  # rows near the threshold: several rounds
    assert len(calls) == 2
    # the same decision as rounds that each call sample(x[rows]) with the generator
    gen = torch.Generator().manual_seed(1)
    first = student.to_predictive(student.sample(x[:40], 4, generator=gen))

    def plain(rows, have, more):
        return student.to_predictive(student.sample(x[:40][rows], more, generator=gen))

    _, _, used = policy.decide_sequential(plain, 40, first)
    np.testing.assert_array_equal(res.columns["defer_samples"], used.numpy())


def test_fit_on_targets_is_refused_in_one_line():
    """A student is distilled, never fitted on targets: a classification student used to train
    its C + 1 outputs as C + 1 classes without a word, a regression one failed on its width."""
    for task, y in (("classification", torch.tensor([0, 1, 2, 0])), ("regression", None)):
        student = bayesify.Distilled(mlp(2, 3 if y is not None else 1, (4,), norm=None),
                                     task=task)  # fmt: skip
        targets = y if y is not None else torch.randn(4)
        with pytest.raises(ValueError, match="^a distilled student is trained on a teacher"):
            student.fit((torch.randn(4, 2), targets), epochs=1, progress=False)
