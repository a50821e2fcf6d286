"""`bench continual`'s paper preset: the authors' recipe (github.com/nvcuong/variational-continual-
learning, ddm/run_split.py, ddm/run_permuted.py, ddm/alg/cla_models_multihead.py)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from bayesify.bench.continual.command import ContinualOptions, _network, _recipe


def test_paper_preset_is_the_authors_recipe():
    jobs = {(j.method, j.dataset): j for j in ContinualOptions(preset="paper").jobs()}
    split, perm = jobs["vcl-random", "split-mnist"], jobs["vcl-random", "permuted-mnist"]
    assert (split.epochs, split.batch_size, split.coreset_size) == (120, 0, 40)  # 0: full batch
    assert (perm.epochs, perm.batch_size, perm.coreset_size) == (100, 256, 200)
    for job in (split, perm):
        assert job.init == "truncated-normal" and job.lr == 1e-3 and job.samples == 100
        sigma = float(F.softplus(torch.tensor(job.init_rho, dtype=torch.float64)))
        assert math.isclose(sigma, math.exp(-3.0), rel_tol=1e-9)  # log-variance -6


def test_truncated_normal_initialisation():
    torch.manual_seed(0)
    net = _network("split-mnist", "truncated-normal")
    w = net.body[1].weight.detach()  # 256 x 784
    assert w.abs().max() <= 0.2 and abs(float(w.std()) - 0.088) < 0.003  # N(0, 0.1²) cut at 2σ
    assert net.heads[3].bias.detach().abs().max() <= 0.2
    assert net.heads[3].bias.detach().abs().max() > 0.01  # biases drawn too, not zero
    plain = _network("split-mnist")
    assert float(plain.body[1].weight.detach().std()) < 0.03  # torch's default: 1/sqrt(784) scale


def test_permuted_overrides_set_t_and_epochs_on_permuted_mnist_only():
    mnist = ("permuted-mnist", "split-mnist")
    opts = ContinualOptions(
        preset="paper", samples_permuted=20, epochs_permuted=30, benchmarks=mnist
    )
    got = {(j.dataset, j.samples, j.epochs, j.batch_size) for j in opts.jobs()}
    assert got == {("permuted-mnist", 20, 30, 256), ("split-mnist", 100, 120, 0)}
    plain = {
        (j.samples, j.epochs) for j in ContinualOptions(preset="paper", benchmarks=mnist).jobs()
    }
    assert plain == {(100, 100), (100, 120)}  # 0: --samples and the preset's epochs
    assert "20 epochs per task" in _recipe("permuted-mnist", opts.__class__(epochs_permuted=20))


def test_report_only_writes_the_stored_rows_and_runs_nothing(tmp_path, monkeypatch):
    import bayesify.bench.continual.command as continual
    from bayesify.bench.jobs import job_config, job_key
    from bayesify.bench.store import ResultsStore

    def no_job(job):
        raise AssertionError("report-only ran a job")

    monkeypatch.setattr(continual, "score_job", no_job)
    opts = ContinualOptions(
        store=str(tmp_path / "r.db"), out=str(tmp_path), benchmarks=("split-mnist",),
        methods=("vcl", "finetune"), seeds=2, report_only=True,
    )  # fmt: skip
    job = next(j for j in opts.jobs() if j.method == "vcl" and j.seed == 0)
    acc = [[0.99], [0.98, 0.97], [0.9, 0.9, 0.9], [0.8] * 4, [0.5, 0.6, 0.7, 0.8, 0.9]]
    with ResultsStore(opts.store) as db:  # one of the four jobs is done
        db.put_done(job_key("continual", job), job_config(job),
                    {"accuracy": acc, "average": 0.7, "task_seconds": [1.0] * 5})  # fmt: skip
    page = continual.run(opts)
    assert "report only, nothing run" in page and "--report-only" in page
    rows = [line for line in page.splitlines() if line.startswith("| vcl |")]
    assert rows == ["| vcl | 0 | 70.0 | 50.0 | 60.0 | 70.0 | 80.0 | 90.0 | 1 | 1 |"]
    assert "| finetune |" not in page and (tmp_path / "continual.md").read_text() == page


def test_fine_tuning_above_vcl_is_not_called_a_setup_that_does_not_forget_when_it_does():
    from bayesify.bench.continual.command import _versus_finetune

    # fine-tuning falls from 0.9 to 0.5 on task 1 (40 points of forgetting), VCL lower still
    forgets = {"finetune": [[0.9], [0.5, 0.9]], "vcl": [[0.9], [0.3, 0.6]]}
    text = _versus_finetune(forgets)[1]
    assert "does not forget" not in text
    assert "fine-tuning forgets here (40.0 points on average" in text
    steady = {"finetune": [[0.99], [0.98, 0.97]], "vcl": [[0.99], [0.97, 0.96]]}
    assert "this setup does not forget, so it cannot tell VCL" in _versus_finetune(steady)[1]
