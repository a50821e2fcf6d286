"""The one training loop every method shares, and the strategies that run it (this process, or
data-parallel replicas)."""

from bayesify.train.loop import (
    Data,
    History,
    Objective,
    OptimizerName,
    as_dataset,
    as_loader,
    loader_batch_size,
    make_optimizer,
    train_loop,
)
from bayesify.train.strategy import LoopOptions, Replica, Strategy, Trained

__all__ = [
    "Data",
    "History",
    "LoopOptions",
    "Objective",
    "OptimizerName",
    "Replica",
    "Strategy",
    "Trained",
    "as_dataset",
    "as_loader",
    "loader_batch_size",
    "make_optimizer",
    "train_loop",
]
