"""The row groups of an MCBN Fashion-MNIST bundle trained with --limit (shared by the scripts)."""

import numpy as np
import torch

from bayesify.data import load_fashion_mnist


def unseen_training_rows(meta: dict) -> np.ndarray:
    """Training-file rows not among the ``--limit`` rows the bundle drew (its train + val):
    ``ImageData.subset``'s stratified draw, replayed for its indices and checked against it."""
    full = load_fashion_mnist("train")
    total, limit, seed = len(full), meta["limit"], meta.get("seed", 0)
    perm = np.random.default_rng(seed).permutation(total)
    labels = full.y.numpy()[perm]
    counts = np.bincount(labels, minlength=full.num_classes)
    order = np.argsort(labels, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(total)
    rank[order] = np.arange(total) - starts[labels[order]]
    chosen = np.sort(perm[np.argsort((rank + 0.5) / counts[labels], kind="stable")[:limit]])
    assert torch.equal(full.x[chosen], full.subset(limit, seed=seed).x)
    return np.setdiff1d(np.arange(total), chosen)
