"""Split and Permuted Fashion-MNIST at full scale: Fashion-MNIST's 60,000 training images train,
its 10,000 test images test; fine-tuning, EWC, SI and VCL run through the same tasks.

Split Fashion-MNIST: classes 0/1, 2/3, 4/5, 6/7, 8/9 (T-shirt/trouser, pullover/dress,
coat/sandal, shirt/sneaker, bag/ankle boot), labels 0/1 within a task, a 784-256-256 body with
a 2-way head per task. Permuted Fashion-MNIST: task 1 the images as they are, task t > 1 a fixed
permutation of the pixels, a 784-100-100-10 network with one head. Each task's training rows are
the first ``train_rows`` (0: all) of the task's rows after a shuffle seeded by the job's
``split``, so seeds differ in data order as well as in weights.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from bayesify.bench.continual.regularisers import EWC, SI, Penalty, train_task
from bayesify.bench.continual.tasks import _network, task_data

FASHION = {"split-fashion": 5, "permuted-fashion": 10}
#: each benchmark's MNIST network (``_network``'s name for it)
NETWORK = {"split-fashion": "split-mnist", "permuted-fashion": "permuted-mnist"}


def fashion_rows(split: int) -> tuple[torch.Tensor, ...]:
    """``(x_train [60000, 784], y_train, x_test [10000, 784], y_test)`` in [0, 1]; the
    training rows shuffled by ``split``."""
    from bayesify.data import load_fashion_mnist

    tr, te = (load_fashion_mnist(s, normalize=False) for s in ("train", "test"))
    order = torch.randperm(len(tr.y), generator=torch.Generator().manual_seed(split))
    return tr.x.reshape(len(tr.y), -1)[order], tr.y[order], te.x.reshape(len(te.y), -1), te.y


def fashion_task(
    dataset: str, task: int, x: torch.Tensor, y: torch.Tensor, rows: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Task ``task``'s first ``rows`` rows (0: all) of ``(x, y)``: pixels permuted or the class
    pair relabelled 0/1."""
    xt, yt = task_data(dataset.replace("fashion", "mnist"), task, x, y)
    return (xt[:rows], yt[:rows]) if rows else (xt, yt)


def regulariser(job: Any, net: torch.nn.Module) -> Penalty:
    """The job's penalty on ``net``: none (finetune), EWC or SI."""
    if job.method == "ewc":
        return EWC(net, job.ewc_lambda)
    if job.method == "si":
        return SI(net, job.si_c, job.si_xi)
    return Penalty(net)


def forgetting(acc: list[list[float]]) -> list[float]:
    """Per task but the last: its best accuracy before the last task less its accuracy after
    it (``acc[t][j]``: task j after training task t)."""
    last = len(acc) - 1
    return [max(acc[t][j] for t in range(j, last)) - acc[last][j] for j in range(last)]


def score_fashion_job(job: Any) -> dict[str, Any]:
    """Train ``job``'s method on the Fashion-MNIST tasks in order; after each, the test accuracy
    on every task so far, and the forgetting after the last."""
    from bayesify.methods import VCL
    from bayesify.models import use_head

    tasks, multi = FASHION[job.dataset], job.dataset == "split-fashion"
    xtr, ytr, xte, yte = fashion_rows(job.split)
    train = [fashion_task(job.dataset, t, xtr, ytr, job.train_rows) for t in range(tasks)]
    test = [fashion_task(job.dataset, t, xte, yte, job.test_rows) for t in range(tasks)]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(job.seed)
        net = _network(NETWORK[job.dataset], job.init)
    batch = [job.batch_size or len(yt) for _, yt in train]
    reg = regulariser(job, net)
    vcl = None
    acc: list[list[float]] = []
    seconds = []
    for t in range(tasks):
        t0 = time.perf_counter()
        head = t if multi else None
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(job.seed * 1000 + t)
            if vcl is not None:
                vcl.fit(train[t], head=head, batch_size=batch[t], epochs=job.epochs, lr=job.lr,
                        seed=job.seed, progress=False)  # fmt: skip
            else:
                with use_head(net, head):
                    train_task(net, *train[t], reg, epochs=job.epochs, batch_size=batch[t],
                               lr=job.lr, seed=job.seed * 1000 + t)  # fmt: skip
            if job.method.startswith("vcl") and vcl is None:  # task 1 by maximum likelihood
                kind = job.method.removeprefix("vcl").removeprefix("-") or "none"
                vcl = VCL(net, task="classification", init_rho=job.init_rho, coreset=kind,
                          coreset_size=job.coreset_size if kind != "none" else 0)  # fmt: skip
                vcl.fit(train[t], head=head, batch_size=batch[t], epochs=job.epochs, lr=job.lr,
                        seed=job.seed, progress=False)  # fmt: skip
        seconds.append(time.perf_counter() - t0)
        row = []
        for j in range(t + 1):
            x, y = test[j]
            model = vcl.module if vcl is not None else net
            with use_head(model, j if multi else None), torch.no_grad():
                if vcl is None:
                    net.eval()
                    mean = net(x)
                else:
                    mean = vcl.predict(x, job.samples, seed=job.seed).mean
            row.append(float((mean.argmax(-1) == y).float().mean()))
        acc.append(row)
    return {"accuracy": acc, "average": sum(acc[-1]) / tasks, "forgetting": forgetting(acc),
            "task_seconds": seconds}  # fmt: skip
