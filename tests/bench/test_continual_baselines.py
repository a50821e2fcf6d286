"""EWC and SI, the continual benchmark's baselines, against independent references: the Fisher
by a loop over rows, SI's ω by the closed-form path integral of gradient descent on a quadratic,
the penalties' gradients by their closed forms."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bayesify.bench.continual.command import ContinualOptions
from bayesify.bench.continual.fashion import forgetting
from bayesify.bench.continual.regularisers import EWC, SI, empirical_fisher, train_task
from bayesify.models import multihead_mlp, use_head


def _loop_fisher(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    out = {k: torch.zeros_like(p) for k, p in net.named_parameters()}
    for xi, yi in zip(x, y, strict=True):
        net.zero_grad()
        F.log_softmax(net(xi[None]), -1)[0, yi].backward()
        for k, p in net.named_parameters():
            if p.grad is not None:
                out[k] += p.grad.pow(2)
    return {k: v / len(y) for k, v in out.items()}


def test_fisher_is_the_mean_squared_gradient_of_the_observed_labels_log_likelihood():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4))
    x, y = torch.randn(11, 3), torch.randint(0, 4, (11,))
    got, want = empirical_fisher(net, x, y, chunk=4), _loop_fisher(net, x, y)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-7)
    assert all(float(v.sum()) > 0 for v in got.values())


def test_fisher_of_a_multihead_network_covers_the_head_in_use_only():
    torch.manual_seed(1)
    net = multihead_mlp(3, 2, (4,), heads=3)
    x, y = torch.randn(6, 3), torch.randint(0, 2, (6,))
    with use_head(net, 1):
        got, want = empirical_fisher(net, x, y), _loop_fisher(net, x, y)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-7)
    assert float(got["heads.0.weight"].abs().sum()) == 0 and float(got["heads.1.weight"].sum()) > 0


class _Quadratic(nn.Module):
    """L(θ) = ½ Σ a_i θ_i², two parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.theta = nn.Parameter(torch.tensor([1.5, -0.7], dtype=torch.float64))
        self.a = torch.tensor([2.0, 0.5], dtype=torch.float64)

    def loss(self) -> torch.Tensor:
        return 0.5 * (self.a * self.theta**2).sum()


def _descend(net: _Quadratic, si: SI, steps: int, lr: float, task_loss: bool = True) -> None:
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    si.start_task()
    for _ in range(steps):
        loss = (net.loss() if task_loss else 0 * net.theta.sum()) + si.penalty()
        opt.zero_grad()
        loss.backward()
        opt.step()
        si.after_step()


def test_si_path_integral_on_a_quadratic_against_its_closed_form():
    net, lr, steps, xi, c = _Quadratic(), 0.1, 7, 1e-3, 0.5
    theta0, a = net.theta.detach().clone(), net.a
    si = SI(net, c=c, xi=xi)
    _descend(net, si, steps, lr)
    # gradient descent: θ_k = r^k θ_0 with r = 1 − lr a; step k gives −g Δθ = lr a² θ_k²
    r = 1 - lr * a
    omega = lr * a**2 * theta0**2 * (1 - r ** (2 * steps)) / (1 - r**2)
    by_hand = sum(lr * a**2 * (r**k * theta0) ** 2 for k in range(steps))
    torch.testing.assert_close(si.omega["theta"], omega)
    torch.testing.assert_close(omega, by_hand)
    # ω is the loss the task lost, summed over parameters
    lost = 0.5 * (a * theta0**2).sum() - net.loss().detach()
    assert float(si.omega["theta"].sum()) > float(
        lost
    )  # a first-order sum overshoots on a convex L
    si.end_task(torch.zeros(1), torch.zeros(1))
    delta = theta0 * (r**steps - 1)
    torch.testing.assert_close(si.weight["theta"], omega / (delta**2 + xi))
    torch.testing.assert_close(si.anchor["theta"], net.theta.detach())
    assert float(si.omega["theta"].abs().sum()) == 0  # reset for the next task


def test_si_omega_counts_the_task_gradient_not_the_penalty():
    net = _Quadratic()
    si = SI(net, c=1.0)
    _descend(net, si, 5, 0.1)
    si.end_task(torch.zeros(1), torch.zeros(1))
    weight = si.weight["theta"].clone()
    with torch.no_grad():
        net.theta.add_(0.3)  # away from the anchor: the penalty alone pulls it back
    _descend(net, si, 5, 0.1, task_loss=False)
    assert float(net.theta.detach().sub(si.anchor["theta"]).abs().max()) < 0.3  # it moved
    torch.testing.assert_close(si.omega["theta"], torch.zeros(2, dtype=torch.float64))
    si.end_task(torch.zeros(1), torch.zeros(1))
    torch.testing.assert_close(si.weight["theta"], weight)  # Ω gains nothing from this task


def test_penalty_gradients_are_their_closed_forms():
    torch.manual_seed(2)
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    x, y = torch.randn(9, 3), torch.randint(0, 2, (9,))
    ewc, si = EWC(net, lam=7.0), SI(net, c=0.3)
    ewc.end_task(x, y)
    fisher = {k: v.clone() for k, v in ewc.weight.items()}
    si.weight = {k: torch.rand_like(p) for k, p in net.named_parameters()}
    si.anchor = {k: p.detach().clone() for k, p in net.named_parameters()}
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.1 * torch.randn_like(p))
    for reg, want in (
        (ewc, {k: 7.0 * fisher[k] * (p - ewc.anchor[k]) for k, p in net.named_parameters()}),
        (si, {k: 2 * 0.3 * si.weight[k] * (p - si.anchor[k]) for k, p in net.named_parameters()}),
    ):
        net.zero_grad()
        reg.penalty().backward()
        for k, p in net.named_parameters():
            torch.testing.assert_close(p.grad, want[k].detach())


def test_ewc_sums_the_fishers_of_the_tasks_and_anchors_at_the_last():
    torch.manual_seed(3)
    net = nn.Sequential(nn.Linear(3, 2))
    ewc = EWC(net, lam=1.0)
    tasks = [(torch.randn(5, 3), torch.randint(0, 2, (5,))) for _ in range(2)]
    want = {k: torch.zeros_like(p) for k, p in net.named_parameters()}
    for x, y in tasks:
        train_task(net, x, y, ewc, epochs=2, batch_size=5, lr=0.05, seed=0)
        for k, f in _loop_fisher(net, x, y).items():
            want[k] += f
    for k, p in net.named_parameters():
        torch.testing.assert_close(ewc.weight[k], want[k], rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(ewc.anchor[k], p.detach())


def test_forgetting_is_the_best_earlier_accuracy_less_the_last():
    acc = [[0.9], [0.8, 0.95], [0.85, 0.7, 0.99]]
    assert [round(f, 6) for f in forgetting(acc)] == [0.05, 0.25]


def test_fashion_jobs_draw_a_data_order_per_seed_and_baselines_only_on_fashion():
    opts = ContinualOptions(seeds=3, epochs_fashion=3, train_rows_fashion=2000, si_c=0.0)
    jobs = opts.jobs()
    fashion = [j for j in jobs if j.dataset.endswith("fashion")]
    assert {(j.split, j.seed) for j in fashion} == {(s, s) for s in range(3)}
    assert {j.split for j in jobs if j.dataset.endswith("mnist")} == {0}
    assert not {j.method for j in jobs if j.dataset.endswith("mnist")} & {"ewc", "si"}
    assert {(j.dataset, j.si_c) for j in fashion if j.method == "si"} == {
        ("split-fashion", 1.0),
        ("permuted-fashion", 0.1),
    }
    assert {(j.epochs, j.train_rows, j.test_rows) for j in fashion} == {(3, 2000, 0)}
    assert math.isclose(next(j for j in fashion if j.method == "ewc").ewc_lambda, 1000.0)


def test_fashion_page_shows_mean_and_standard_error_over_seeds(tmp_path, monkeypatch):
    import statistics

    import bayesify.bench.continual.command as continual
    from bayesify.bench.jobs import job_config, job_key
    from bayesify.bench.store import ResultsStore

    monkeypatch.setattr(continual, "score_job", lambda job: 1 / 0)
    opts = ContinualOptions(
        store=str(tmp_path / "r.db"), out=str(tmp_path), benchmarks=("split-fashion",),
        methods=("finetune", "ewc"), seeds=3, report_only=True,
    )  # fmt: skip
    finals = [0.5, 0.6, 0.9]
    with ResultsStore(opts.store) as db:
        for job in opts.jobs():
            if job.method != "finetune":
                continue
            f = finals[job.seed]
            acc = [[1.0] * (t + 1) for t in range(4)] + [[f, 1.0, 1.0, 1.0, 1.0]]
            metrics = {"accuracy": acc, "average": (f + 4) / 5, "task_seconds": [2.0] * 5,
                       "forgetting": forgetting(acc)}  # fmt: skip
            db.put_done(job_key("continual", job), job_config(job), metrics)
    page = continual.run(opts)
    mean = statistics.mean(100 * (f + 4) / 5 for f in finals)
    se = statistics.stdev(100 * (f + 4) / 5 for f in finals) / math.sqrt(3)
    row = next(line for line in page.splitlines() if line.startswith("| finetune | "))
    assert row.startswith(f"| finetune | {mean:.1f} ± {se:.1f} | ")
    t1 = statistics.stdev(100 * f for f in finals) / math.sqrt(3)
    assert f"| {100 * statistics.mean(finals):.1f} ± {t1:.1f} |" in row
    forget = [line for line in page.splitlines() if line.startswith("| finetune | ")][1]
    task1 = statistics.mean(100 * (1 - f) for f in finals)
    assert forget.split(" | ")[2].startswith(f"{task1:.1f} ± ")  # task 1's forgetting
    # forgetting 12.5, 10 and 2.5 points: 8.3 ± 3.0, not two standard errors above 5
    assert "Fine-tuning may forget: the seeds are too spread" in page and "| ewc |" not in page


@pytest.mark.parametrize(
    ("mean", "se", "says"),
    [(0.108, 0.065, "may forget"), (0.108, 0.02, "forgets here"), (0.029, 0.005, "barely"),
     (0.06, float("nan"), "forgets on one seed")],
)  # fmt: skip
def test_fine_tuning_forgets_only_beyond_two_standard_errors(mean, se, says):
    from bayesify.bench.continual.fashion_page import forgetting_verdict

    assert says in forgetting_verdict(mean, se)
