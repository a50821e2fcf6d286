"""The continual benchmarks' tasks and networks: MNIST rows, Split and Permuted tasks of any
image rows, and the ReLU MLPs."""

from __future__ import annotations

import torch

SPLIT_PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))

__all__ = ["SPLIT_PAIRS", "_network", "mnist_rows", "task_data"]


def mnist_rows(train_rows: int, test_rows: int, split: int) -> tuple[torch.Tensor, ...]:
    """``(x_train [n, 784], y_train, x_test [m, 784], y_test)`` from MNIST's test images in
    [0, 1], disjoint, after a shuffle seeded by ``split``."""
    from bayesify.data import load_mnist

    data = load_mnist("test", normalize=False)
    if train_rows + test_rows > len(data.y):
        raise ValueError(f"train-rows + test-rows must be <= {len(data.y)} (MNIST test images)")
    order = torch.randperm(len(data.y), generator=torch.Generator().manual_seed(split))
    x, y = data.x.reshape(len(data.y), -1)[order], data.y[order]
    return x[:train_rows], y[:train_rows], x[-test_rows:], y[-test_rows:]


def task_data(
    dataset: str, task: int, x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Task ``task``'s rows of ``(x, y)``: pixels permuted (permuted-mnist) or the digit pair
    relabelled 0/1 (split-mnist)."""
    if dataset == "permuted-mnist":
        if task == 0:
            return x, y
        perm = torch.randperm(x.shape[1], generator=torch.Generator().manual_seed(100 + task))
        return x[:, perm], y
    a, b = SPLIT_PAIRS[task]
    rows = (y == a) | (y == b)
    return x[rows], (y[rows] == b).long()


def _network(dataset: str, init: str = "torch") -> torch.nn.Module:
    """The benchmark's ReLU MLP; ``init="truncated-normal"``: every linear layer's weights and
    biases from N(0, 0.1²) truncated at ±0.2 (the authors' code), else torch's default."""
    from bayesify.models import mlp, multihead_mlp

    if dataset == "permuted-mnist":
        net = mlp(784, 10, (100, 100), norm="none")
    else:
        net = multihead_mlp(784, 2, (256, 256), heads=len(SPLIT_PAIRS))
    if init == "truncated-normal":
        with torch.no_grad():
            for m in net.modules():
                if isinstance(m, torch.nn.Linear):
                    for p in (m.weight, m.bias):
                        torch.nn.init.trunc_normal_(p, std=0.1, a=-0.2, b=0.2)
    elif init != "torch":
        raise ValueError(f"init must be torch or truncated-normal, got {init!r}")
    return net
