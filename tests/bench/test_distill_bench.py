"""`bench distill` on images: the page's mean ± standard error and ratios against numpy, and a
tiny run over two seeds into a store that resumes (real Fashion-MNIST / MNIST files and
scikit-learn's digits; skipped without the shared data)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from bayesify.bench.distill import command as distill
from bayesify.bench.distill.jobs import OOD_SETS, DistillJob, score_job
from bayesify.bench.distill.page import images_section
from bayesify.data import DataError, data_root


def _metrics(teacher: float, student: float, digits: tuple[float, float]) -> dict:
    model = {
        "error": 0.1,
        "nll": 0.3,
        "ece": 0.01,
        "auroc_mnist": teacher,
        "auroc_digits": digits[0],
    }
    pupil = {**model, "auroc_mnist": student, "auroc_digits": digits[1],
             "spearman_in": 0.8, "spearman_mnist": 0.5, "spearman_digits": 0.4}  # fmt: skip
    return {"teacher": model, "student": pupil, "student_draws": pupil, "chosen_epoch": 2,
            "seconds": {"teacher": 10.0, "student": 20.0},
            "n": {"train": 100, "in": 50, "mnist": 40, "digits": 30}}  # fmt: skip


def test_page_ratios_and_standard_errors_match_numpy_and_count_seeds_below_target():
    digits = [(0.80, 0.88), (0.90, 0.72), (0.70, 0.70)]  # ratios 1.1, 0.8, 1.0
    rows = [{"method": "mc-dropout", "seed": s, "status": "done",
             "metrics": _metrics(0.85, 0.80 + 0.01 * s, d)}
            for s, d in enumerate(digits)]  # fmt: skip
    rows.append({"method": "ensemble", "seed": 0, "status": "failed", "metrics": None})
    opts = distill.DistillOptions(members=2, seeds=3)
    text = "\n".join(images_section(rows, opts, "copies"))
    r = np.array([b / a for a, b in digits])
    want = f"{r.mean():.3f} ± {r.std(ddof=1) / math.sqrt(3):.3f}"
    line = next(x for x in text.splitlines() if x.startswith("| MC dropout | digits | 3 |"))
    assert want in line and "| 2 of 3 | 0.800 |" in line
    student = np.array([0.80, 0.81, 0.82])
    mnist = next(x for x in text.splitlines() if x.startswith("| MC dropout | MNIST | 3 |"))
    assert f"{student.mean():.4f} ± {student.std(ddof=1) / math.sqrt(3):.4f}" in mnist
    assert "| 3 of 3 |" in mnist
    assert "Seeds 0, 1, 2 (N = 3)" in text
    assert "1 job(s) failed: ensemble seed 0" in text
    assert "| ensemble of 2 |" not in text  # no done row: no line


def test_tiny_run_over_two_seeds_scores_both_ood_sets_and_resumes(tmp_path):
    try:
        data_root()
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")
    opts = distill.DistillOptions(limit=32, epochs=1, members=0, student_epochs=1, samples=3,
                                  n_test=40, n_ood=30, n_digits=25, uci=(), seeds=2, seed=5,
                                  store=str(tmp_path / "r.db"), out=str(tmp_path / "d.md"),
                                  bundles=str(tmp_path / "b"))  # fmt: skip
    text = distill.run(opts)
    assert "2 finished, 0 skipped" in text
    assert "| MC dropout | digits | 2 |" in text and "Seeds 5, 6 (N = 2)" in text
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [
        "fmnist-mc-dropout", "fmnist-mc-dropout-student"]  # fmt: skip

    from bayesify.bench.store import ResultsStore

    with ResultsStore(opts.store) as db:
        rows = {r["seed"]: r["metrics"] for r in db.records(distill.EXPERIMENT)}
    assert sorted(rows) == [5, 6]
    for m in rows.values():
        assert m["n"] == {"train": 32, "in": 40, "mnist": 30, "digits": 25}
        for model in ("teacher", "student", "student_draws"):
            assert all(0 <= m[model][f"auroc_{k}"] <= 1 for k, _ in OOD_SETS)
        assert all(-1 <= m["student"][f"spearman_{w}"] <= 1 for w in ("in", "mnist", "digits"))
    assert rows[5]["student"] != rows[6]["student"]  # the seed draws the models

    again = distill.run(opts)  # every row is done: nothing is recomputed
    assert "0 finished, 2 skipped" in again
    assert again.split("## Fashion")[1].split("Jobs:")[0] == text.split("## Fashion")[1].split(
        "Jobs:")[0]  # fmt: skip


def test_the_student_spearman_on_ood_rows_is_scipys_on_the_saved_models(tmp_path):
    try:
        data_root()
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")
    import bayesify
    from bayesify.bench.distill.jobs import image_data

    job = DistillJob(method="mc-dropout", dataset="fashion-mnist", split=0, seed=1, limit=32,
                     epochs=1, student_epochs=1, samples=3, n_test=40, n_ood=30, n_digits=25,
                     bundles=str(tmp_path))  # fmt: skip
    m = score_job(job)
    teacher = bayesify.load(tmp_path / "fmnist-mc-dropout")
    student = bayesify.load(tmp_path / "fmnist-mc-dropout-student")
    x = image_data(job)["digits"]  # the third row set: predict seed 3
    t_mi = teacher.predict(x, 3, seed=3).mutual_information.numpy()
    s_mi = student.summaries(x)["mutual_information"].numpy()
    assert m["student"]["spearman_digits"] == pytest.approx(spearmanr(t_mi, s_mi)[0], abs=1e-6)


def test_uci_runs_use_split_i_with_seed_i_and_the_page_is_their_mean_and_standard_error(tmp_path):
    try:
        data_root()
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")
    from bayesify.bench.distill.uci import EXPERIMENT, UCIDistillJob, score_uci_job
    from bayesify.bench.store import ResultsStore

    opts = distill.DistillOptions(images=False, uci=("bostonHousing",), uci_epochs=2,
                                  uci_members=2, samples=4, seeds=2, seed=3,
                                  store=str(tmp_path / "r.db"),
                                  out=str(tmp_path / "d.md"))  # fmt: skip
    text = distill.run(opts)
    assert "## Fashion" not in text and "4 finished, 0 skipped" in text
    with ResultsStore(opts.store) as db:
        rows = list(db.records(EXPERIMENT))
    assert sorted((r["method"], r["split"], r["seed"]) for r in rows) == [
        ("ensemble", 0, 3),
        ("ensemble", 1, 4),
        ("mc-dropout", 0, 3),
        ("mc-dropout", 1, 4),
    ]
    runs = {r["split"]: r["metrics"] for r in rows if r["method"] == "mc-dropout"}
    assert runs[0]["teacher"]["rmse"] != runs[1]["teacher"]["rmse"]  # two splits, two seeds
    rmse = np.array([runs[s]["student"]["rmse"] for s in (0, 1)])
    cov = 100 * np.array([runs[s]["teacher"]["coverage90"] for s in (0, 1)])
    student = next(x for x in text.splitlines()
                   if x.startswith("| bostonHousing | MC dropout | student | 2 |"))  # fmt: skip
    assert f"{rmse.mean():.4f} ± {rmse.std(ddof=1) / math.sqrt(2):.4f}" in student
    teacher = next(x for x in text.splitlines()
                   if x.startswith("| bostonHousing | MC dropout | teacher | 2 |"))  # fmt: skip
    assert f"{cov.mean():.1f} ± {cov.std(ddof=1) / math.sqrt(2):.1f}" in teacher

    # a run's figures are its job's: the job alone, recomputed, gives the stored student RMSE
    job = UCIDistillJob(method="mc-dropout", dataset="bostonHousing", split=1, seed=4, epochs=2,
                        members=0, samples=4)  # fmt: skip
    again = score_uci_job(job)
    assert again["student"]["rmse"] == pytest.approx(runs[1]["student"]["rmse"], rel=1e-5)
    assert 0 <= again["teacher"]["coverage90"] <= 1 and -1 <= again["student"]["spearman"] <= 1
    assert "0 finished, 4 skipped" in distill.run(opts)  # resumed: nothing recomputed
