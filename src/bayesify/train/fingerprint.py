"""What every DDP replica must share before it trains: the rows of the training and validation
data with an order-sensitive checksum, and the loop options that decide the steps
(:mod:`bayesify.train.distributed` compares the replicas' fingerprints)."""

from __future__ import annotations

from typing import Any

import torch

from bayesify.train.loop import Data, as_dataset
from bayesify.train.strategy import LoopOptions


def run_fingerprint(train: Data, val: Data | None, loop: LoopOptions) -> dict[str, float]:
    """What every replica must share: rows and an order-sensitive float64 checksum of the
    training and validation data (NaN for a Dataset that is not in-memory tensors), and the
    loop options that decide the steps."""
    out: dict[str, float] = {}
    for name, data in (("training rows", train), ("validation rows", val)):
        rows, checksum = (0.0, 0.0) if data is None else _rows_checksum(as_dataset(data))
        out[f"{name} (count)"], out[f"{name} (checksum)"] = rows, checksum
    out |= {
        "epochs": loop.epochs,
        "batch size": loop.batch_size,
        "learning rate": loop.lr,
        "weight decay": loop.weight_decay,
        "patience": -1 if loop.patience is None else loop.patience,
        "seed": loop.seed,
    }
    return out


def _rows_checksum(ds: Any) -> tuple[float, float]:
    """``(rows, Σ_i (i+1) · Σ row i)`` in float64 over a TensorDataset's tensors."""
    n = len(ds)
    if not isinstance(ds, torch.utils.data.TensorDataset):
        return float(n), float("nan")
    total, chunk = 0.0, 4096  # rows at a time: no float64 copy of a whole image set
    for t in ds.tensors:
        for start in range(0, n, chunk):
            rows = t[start : start + chunk].detach().cpu().double()
            weights = torch.arange(start + 1, start + len(rows) + 1, dtype=torch.float64)
            total += float(rows.reshape(len(rows), -1).sum(1) @ weights)
    return float(n), total
