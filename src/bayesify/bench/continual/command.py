"""Variational continual learning (Nguyen et al. 2018) on Permuted MNIST (10 tasks, one head) and
Split MNIST (5 tasks, a head per task): VCL with and without a coreset beside plain fine-tuning,
accuracy on every earlier task after each new one, run job by job into a resumable results store.

Data: the shared data folder holds only MNIST's 10,000 test images (no training images), so
both benchmarks draw their training and test rows from them: a seeded shuffle, the first
``train_rows`` for training, the last ``test_rows`` for testing (disjoint). Permuted MNIST: task
1 is the images as they are, task t > 1 a fixed seeded permutation of the 784 pixels; a
784-100-100-10 ReLU MLP. Split MNIST: digits 0/1, 2/3, 4/5, 6/7, 8/9, labels 0/1 within a task;
a 784-256-256 ReLU body with five 2-way heads, head t for task t.

Split and Permuted Fashion-MNIST (``split-fashion``, ``permuted-fashion``; ``fashion.py``) train
on Fashion-MNIST's 60,000 training images (``--train-rows-fashion``: a subset per task) and test
on its 10,000 test images, each seed with its own data order, and add the baselines ``ewc`` and
``si`` (``regularisers.py``); their page shows mean ± standard error and per-task forgetting.

Methods: ``finetune`` (a deterministic network trained on each task in turn, nothing kept),
``vcl`` (no coreset), ``vcl-random`` and ``vcl-k-center`` (``coreset_size`` rows per task,
refitted before prediction). VCL's first task starts from the network fine-tuning trained on
task 1 (a maximum-likelihood start) with posterior σ = softplus(init_rho).

The ``paper`` preset follows the authors' code (github.com/nvcuong/variational-continual-learning,
``ddm/run_split.py``, ``ddm/run_permuted.py``, ``ddm/alg/cla_models_multihead.py``): weights and
biases drawn from a normal with std 0.1 truncated at two std, posterior log-variance −6
(σ = e⁻³), Adam 10⁻³; Split MNIST 120 epochs of full-batch steps, Permuted MNIST 100 epochs of
batches of 256. The ``quick`` preset keeps torch's default initialisation and batches of 256.

    bayesify bench continual --store /work/runs/vcl/results.db --out benchmarks

``--epochs-permuted`` and ``--samples-permuted`` shrink Permuted MNIST alone (its ``paper``
preset is about ten times Split MNIST's cost); ``--report-only`` rewrites the page from the rows
already in the store.
"""

from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from bayesify.bench.continual.fashion import FASHION, forgetting, score_fashion_job
from bayesify.bench.continual.fashion_page import FORGETS_AT, fashion_intro, fashion_section
from bayesify.bench.continual.tasks import _network, mnist_rows, task_data
from bayesify.bench.jobs import key_field
from bayesify.bench.options import check_choices, command_line, option, write_report
from bayesify.bench.runner import run_jobs, stored_rows
from bayesify.bench.store import RowKey

EXPERIMENT = "continual"
BENCHMARKS = {"permuted-mnist": 10, "split-mnist": 5, **FASHION}
METHODS = ("finetune", "ewc", "si", "vcl", "vcl-random", "vcl-k-center")
#: posterior σ = e⁻³ (the authors' code: log-variance −6) as ρ of σ = softplus(ρ)
PAPER_RHO = math.log(math.expm1(math.exp(-3.0)))
#: the presets per benchmark: epochs per task, batch (0: all of a task's rows), weight
#: initialisation, initial posterior ρ, training and test rows (quick: fewer of each)
_PAPER = {"init": "truncated-normal", "init_rho": PAPER_RHO, "train_rows": 8000, "test_rows": 2000}
_QUICK = {"epochs": 20, "batch_size": 256, "init": "torch", "init_rho": -3.0, "train_rows": 4000,
          "test_rows": 1000}  # fmt: skip
PRESETS = {
    "paper": {
        "split-mnist": {**_PAPER, "epochs": 120, "batch_size": 0},
        "permuted-mnist": {**_PAPER, "epochs": 100, "batch_size": 256},
    },
    "quick": {b: _QUICK for b in BENCHMARKS},
}
#: Fashion-MNIST: the MNIST recipe of each kind on all training and test rows (0: all)
for _p in PRESETS.values():
    _p["split-fashion"] = {**_p["split-mnist"], "train_rows": 0, "test_rows": 0}
    _p["permuted-fashion"] = {**_p["permuted-mnist"], "train_rows": 0, "test_rows": 0}
#: SI's c per benchmark kind (Zenke et al.: 1 on Split MNIST, 0.1 on Permuted MNIST)
SI_C = {"split-fashion": 1.0, "permuted-fashion": 0.1}


@dataclass(frozen=True)
class ContinualJob:
    """One row of the store: a method run through every task of one benchmark."""

    method: str
    dataset: str
    split: int  # the data shuffle
    seed: int  # weights, batch order, coresets and sampling
    epochs: int = 100
    train_rows: int = 8000
    test_rows: int = 2000
    batch_size: int = 256  # 0: one batch of all the task's rows
    lr: float = 1e-3
    coreset_size: int = 200
    init_rho: float = -3.0
    samples: int = 50
    init: str = "torch"  # or "truncated-normal": N(0, 0.1²) cut at ±0.2, weights and biases
    ewc_lambda: float = key_field(0.0)  # λ of EWC's λ/2 Σ F (θ − θ*)²
    si_c: float = key_field(0.0)  # c of SI's c Σ Ω (θ − θ*)²
    si_xi: float = key_field(1e-3)  # ξ of SI's Ω = Σ ω / (Δ² + ξ)


def score_job(job: ContinualJob) -> dict[str, Any]:
    """Train ``job``'s method on the tasks in order; after each task, the test accuracy on every
    task so far (the runner's job function)."""
    if job.dataset in FASHION:
        return score_fashion_job(job)
    from bayesify.methods import VCL, Deterministic
    from bayesify.models import use_head

    tasks = BENCHMARKS[job.dataset]
    multi = job.dataset == "split-mnist"
    xtr, ytr, xte, yte = mnist_rows(job.train_rows, job.test_rows, job.split)
    train = [task_data(job.dataset, t, xtr, ytr) for t in range(tasks)]
    test = [task_data(job.dataset, t, xte, yte) for t in range(tasks)]
    fit = dict(epochs=job.epochs, lr=job.lr, seed=job.seed, progress=False)
    batch = [job.batch_size or len(yt) for _, yt in train]  # 0: full batch
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(job.seed)
        net = _network(job.dataset, job.init)
    det = Deterministic(net, task="classification")
    with use_head(det.net, 0 if multi else None):
        det.fit(train[0], batch_size=batch[0], **fit)
    if job.method == "finetune":
        model, start = det, 1
    else:
        kind = job.method.removeprefix("vcl").removeprefix("-") or "none"
        size = job.coreset_size if kind != "none" else 0
        model = VCL(det.net, task="classification", init_rho=job.init_rho, coreset=kind,
                    coreset_size=size)  # fmt: skip
        start = 0
    acc: list[list[float]] = []
    seconds = []
    for t in range(tasks):
        t0 = time.perf_counter()
        if t >= start:
            if job.method == "finetune":
                with use_head(model.net, t if multi else None):
                    model.fit(train[t], batch_size=batch[t], **fit)
            else:
                model.fit(train[t], head=t if multi else None, batch_size=batch[t], **fit)
        seconds.append(time.perf_counter() - t0)
        row = []
        for j in range(t + 1):
            x, y = test[j]
            with use_head(getattr(model, "module", model.net), j if multi else None):
                samples = 1 if job.method == "finetune" else job.samples
                pred = model.predict(x, samples, seed=job.seed)
            row.append(float((pred.mean.argmax(-1) == y).float().mean()))
        acc.append(row)
    return {"accuracy": acc, "average": sum(acc[-1]) / len(acc[-1]), "task_seconds": seconds}


@dataclass(frozen=True)
class ContinualOptions:
    """Options of ``bayesify bench continual``."""

    command: ClassVar[str] = "continual"
    store: str = option("benchmarks/continual/results.db", "The results store (sqlite file).")
    out: str = option("benchmarks", "Folder for continual.md and its figures.")
    benchmarks: tuple[str, ...] = option(tuple(BENCHMARKS), "Benchmarks, comma-separated.")
    methods: tuple[str, ...] = option(METHODS, "Methods, comma-separated.")
    preset: str = option(
        "paper", "paper (the authors' recipe on 8000 training rows) or quick (see the page)."
    )
    seeds: int = option(1, "Seeds (one job per seed, method and benchmark).")
    coreset_permuted: int = option(200, "Coreset rows per task, Permuted MNIST.")
    coreset_split: int = option(40, "Coreset rows per task, Split MNIST.")
    samples: int = option(100, "MC samples T of VCL's test predictions.")
    samples_permuted: int = option(
        0, "MC samples T of VCL's predictions on Permuted MNIST (0: --samples)."
    )
    epochs_permuted: int = option(0, "Epochs per task on Permuted MNIST (0: the preset's).")
    samples_fashion: int = option(0, "T of VCL's predictions on Fashion (0: --samples).")
    epochs_fashion: int = option(0, "Epochs per task on the Fashion benchmarks (0: preset's).")
    batch_fashion: int = option(-1, "Batch on the Fashion benchmarks (0: full; -1: preset's).")
    train_rows_fashion: int = option(0, "Training rows per Fashion task (0: all of them).")
    test_rows_fashion: int = option(0, "Test rows per Fashion task (0: all of them).")
    ewc_lambda: float = option(1000.0, "EWC's λ (penalty λ/2 Σ F (θ − θ*)²).")
    si_c: float = option(0.0, "SI's c (0: 1 on Split, 0.1 on Permuted, as Zenke et al.).")
    report_only: bool = option(False, "Write the page from the store; run no job.")
    workers: int = option(1, "Parallel worker processes.")
    cluster: str = option("", "Dask scheduler (tcp://host:8786) whose workers run the jobs.")

    def __post_init__(self) -> None:
        check_choices("benchmarks", self.benchmarks, BENCHMARKS)
        check_choices("methods", self.methods, METHODS)
        check_choices("preset", (self.preset,), PRESETS)
        if min(self.seeds, self.samples, self.workers) < 1:
            raise ValueError("seeds, samples and workers must be >= 1")
        if min(self.samples_permuted, self.epochs_permuted) < 0:
            raise ValueError("samples-permuted and epochs-permuted must be >= 0 (0: not set)")

    def recipe(self, bench: str) -> dict[str, Any]:
        """The preset's settings for ``bench`` with ``epochs_permuted`` applied."""
        p = dict(PRESETS[self.preset][bench])
        if bench == "permuted-mnist" and self.epochs_permuted:
            p["epochs"] = self.epochs_permuted
        if bench in FASHION:
            p["epochs"] = self.epochs_fashion or p["epochs"]
            p["batch_size"] = p["batch_size"] if self.batch_fashion < 0 else self.batch_fashion
            p["train_rows"], p["test_rows"] = self.train_rows_fashion, self.test_rows_fashion
            p.update(ewc_lambda=self.ewc_lambda, si_c=self.si_c or SI_C[bench])
        return p

    def samples_of(self, bench: str) -> int:
        """T of VCL's predictions on ``bench``."""
        if bench == "permuted-mnist" and self.samples_permuted:
            return self.samples_permuted
        if bench in FASHION and self.samples_fashion:
            return self.samples_fashion
        return self.samples

    def jobs(self) -> list[ContinualJob]:
        return [
            ContinualJob(
                m,
                b,
                s if b in FASHION else 0,  # Fashion: each seed its own data order
                s,
                **self.recipe(b),
                coreset_size=self.coreset_permuted
                if b.startswith("permuted")
                else self.coreset_split,
                samples=self.samples_of(b),
            )  # fmt: skip
            for b in self.benchmarks
            for m in self.methods
            for s in range(self.seeds)
            if b in FASHION or m not in ("ewc", "si")  # the MNIST rows predate EWC and SI
        ]


def run(opts: ContinualOptions) -> str:
    """Run the jobs not yet in the store (unless ``report_only``: the page shows the rows
    already there), then write ``out/continual.md`` from the store."""
    from bayesify.bench.runner import job_key

    torch.set_num_threads(1)
    t0 = time.time()
    jobs = opts.jobs()
    summary: Any = "report only, nothing run"
    if not opts.report_only:
        summary = run_jobs(
            EXPERIMENT, jobs, score_job, opts.store, workers=opts.workers, cluster=opts.cluster
        )
    keys = {job_key(EXPERIMENT, j): j for j in jobs}
    rows = stored_rows(opts.store, EXPERIMENT, jobs)
    return write_report(Path(opts.out) / "continual.md", _page(opts, rows, keys, summary, t0))


def _recipe(bench: str, opts: ContinualOptions) -> str:
    """One benchmark's preset in words."""
    p = opts.recipe(bench)
    batch = "full-batch steps" if p["batch_size"] == 0 else f"batches of {p['batch_size']}"
    return (f"{bench} {p['epochs']} epochs per task of {batch}, {p['train_rows']} training "
            f"and {p['test_rows']} test rows drawn from MNIST's 10,000 test images, "
            f"{p['init']} initialisation, posterior σ initialised at "
            f"{float(torch.nn.functional.softplus(torch.tensor(p['init_rho']))):.3f}, "
            f"T = {opts.samples_of(bench)} samples per VCL prediction")  # fmt: skip


def _versus_finetune(curves: dict[str, list[list[float]]]) -> list[str]:
    """A sentence saying whether any VCL variant beats fine-tuning's final average; the setup
    is said not to forget only where fine-tuning's mean forgetting (on its mean curve) is
    below :data:`FORGETS_AT` points."""
    avg = {m: 100 * sum(c[-1]) / len(c[-1]) for m, c in curves.items()}
    vcl = {m: a for m, a in avg.items() if m.startswith("vcl")}
    if "finetune" not in avg or not vcl:
        return []
    best = max(vcl, key=vcl.__getitem__)
    lost = forgetting(curves["finetune"])
    forgets = 100 * sum(lost) / len(lost) if lost else 0.0
    if avg["finetune"] >= vcl[best] and forgets >= FORGETS_AT:
        text = (f"Fine-tuning's average ({avg['finetune']:.1f}%) is at least every VCL "
                f"variant's (best {best}, {vcl[best]:.1f}%), though fine-tuning forgets here "
                f"({forgets:.1f} points on average over tasks 1 to T − 1, on the mean over "
                "seeds): no VCL variant ends above doing nothing.")  # fmt: skip
    elif avg["finetune"] >= vcl[best]:
        text = (f"Fine-tuning's average ({avg['finetune']:.1f}%) is at least every VCL "
                f"variant's (best {best}, {vcl[best]:.1f}%): this setup does not forget, so it "
                "cannot tell VCL from doing nothing.")  # fmt: skip
    else:
        text = (f"The best VCL variant ({best}, {vcl[best]:.1f}%) is above fine-tuning "
                f"({avg['finetune']:.1f}%) by {vcl[best] - avg['finetune']:.1f} points; "
                "without error bars.")  # fmt: skip
    return ["", text]


def _page(opts: ContinualOptions, rows: list[dict[str, Any]], keys: dict[Any, ContinualJob],
          summary: Any, t0: float) -> str:  # fmt: skip
    from bayesify.plots.continual import task_accuracy_plot

    job0 = next(iter(keys.values()))
    lines = [
        "# Continual learning: fine-tuning, EWC, SI and VCL",
        "",
        f"`{command_line(opts)}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"1 thread per process; this call: {summary} ({time.time() - t0:.0f} s wall).",
        "",
    ]
    fashion = [b for b in opts.benchmarks if b in FASHION]
    if fashion:
        lines += ["Split and Permuted Fashion-MNIST: Fashion-MNIST's training images train and "
                  "its test images test. Fine-tuning (no penalty) is the floor; EWC and SI "
                  "(`bench/continual/regularisers.py`) add their quadratic penalty to the same "
                  "Adam steps; VCL's first task starts from the network trained on it by "
                  "maximum likelihood. The networks are the MNIST benchmarks' below.", "",
                  *fashion_intro(list(keys.values())), "",
                  "The earlier runs on MNIST's 10,000 test images alone (no training images, "
                  "fine-tuning the only baseline) are on [continual-mnist-test.md]"
                  f"({os.path.relpath('benchmarks/continual-mnist-test.md', opts.out)}).",
                  ""]  # fmt: skip
    if len(fashion) == len(opts.benchmarks):
        for bench in fashion:
            lines += fashion_section(bench, rows, opts.methods, opts.out)
        return "\n".join(lines)
    lines += [
        "MNIST's 10,000 test images only: "
        f"preset `{opts.preset}`: "
        + "; ".join(_recipe(b, opts) for b in opts.benchmarks)
        + f"; Adam lr {job0.lr} (fine-tuning predicts by "
        "the deterministic network's one pass). VCL's first task starts from the network "
        "fine-tuning trained on it by maximum likelihood, as in the authors' code.",
        "",
        "**Recipe.** The `paper` preset is the authors' code (github.com/nvcuong/"
        "variational-continual-learning: `ddm/run_split.py`, `ddm/run_permuted.py`, "
        "`ddm/alg/vcl.py`, `ddm/alg/cla_models_multihead.py`): Split MNIST 784-256-256 with a "
        "2-way head per task, 120 epochs of full-batch steps, coreset 40 rows per task; "
        "Permuted MNIST 784-100-100-10, 100 epochs of batches of 256, coreset 200; weights and "
        "biases N(0, 0.1²) truncated at ±0.2, posterior log-variance −6 at the start "
        "(σ = e⁻³ ≈ 0.050), prior N(0, 1), 100 draws per prediction. The `quick` preset keeps "
        "torch's default initialisation, batches of 256 and 20 epochs.",
        "",
        "**What this machine could not run.** The shared data folder holds only MNIST's 10,000 "
        "test images, not the 60,000 training images, so every task trains on a part of the "
        "test images and is tested on another, disjoint part: far fewer rows per task than "
        "the full training set (Split MNIST, `paper`: about 1,600 training rows per digit pair "
        "against about 12,000; Permuted MNIST: 8,000 rows per task against 60,000), and "
        "each test set is a fifth of the paper's.",
        "",
        "**Published figures.** The paper's text could not be read here: it is not in the "
        "papers folder, the search tool returns its arXiv HTML (ar5iv 1710.10628) only up to "
        "the introduction, and the authors' repository shows its results as images "
        "(`ddm/results/permuted.jpg`, `split.jpg`); so no table, figure or page of it is "
        "cited. A third-party leaderboard page on the paper "
        "(https://www.wizwand.com/paper/68fa645e1e209131cea040c5) lists 98.4% "
        'mean test accuracy on Split MNIST and two Permuted MNIST figures, 90% ("PMNIST '
        '(test)") and 95.5% ("Permuted MNIST, mean test accuracy"), without saying which '
        "variant (with or without coreset) or where in the paper.",
        "",
    ]
    for bench in opts.benchmarks:
        if bench in FASHION:
            lines += fashion_section(bench, rows, opts.methods, opts.out)
            continue
        lines += [f"## {bench} ({BENCHMARKS[bench]} tasks, MNIST's test images only)", "",
                  "Average test accuracy over all tasks after the last one (mean over seeds: "
                  "the seeds share one data split and differ in weights, batch order and "
                  "coresets; no error bars), and per task after the last one.", "",
                  "| method | coreset/task | average | " + " | ".join(
                      f"task {j + 1}" for j in range(BENCHMARKS[bench])) + " | runs | s/task |",
                  "| --- | --- | --- | " + "--- | " * BENCHMARKS[bench]
                  + "--- | --- |"]  # fmt: skip
        curves: dict[str, list[list[float]]] = {}
        for m in opts.methods:
            cell = [r for r in rows if r["method"] == m and r["dataset"] == bench]
            if not cell:
                continue
            mats = [r["metrics"]["accuracy"] for r in cell]
            mean = [[sum(ms[t][j] for ms in mats) / len(mats) for j in range(len(mats[0][t]))]
                    for t in range(len(mats[0]))]  # fmt: skip
            curves[m] = mean
            last = mean[-1]
            secs = [s for r in cell for s in r["metrics"]["task_seconds"]]
            cs = keys[RowKey.of(cell[0])].coreset_size if m.startswith("vcl-") else 0
            lines.append(f"| {m} | {cs} | {100 * sum(last) / len(last):.1f} | "
                         + " | ".join(f"{100 * a:.1f}" for a in last)
                         + f" | {len(cell)} | {sum(secs) / len(secs):.0f} |")  # fmt: skip
        lines += _versus_finetune(curves)
        if curves:
            fig = Path(opts.out) / "continual" / f"{bench}.png"
            task_accuracy_plot(curves, title=bench, path=fig)
            lines += ["", f"![{bench}: accuracy on each task after each new one]"
                          f"(continual/{fig.name})", ""]  # fmt: skip
    return "\n".join(lines) + "\n"
