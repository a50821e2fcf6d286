"""The one training loop every method shares; the objective is supplied by the method."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
)

from bayesify.options import OptimizerName, parse_option
from bayesify.progress import progress_bar

log = logging.getLogger(__name__)

Data = tuple[Tensor, Tensor] | Dataset | DataLoader
# objective(x, y, progress) -> scalar loss, progress in [0, 1) through training (for annealing)
Objective = Callable[[Tensor, Tensor, float], Tensor]


@dataclass
class History:
    """Per-epoch training loss and validation score (lower is better)."""

    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    best_epoch: int = -1
    stopped_early: bool = False

    @property
    def epochs(self) -> int:
        return len(self.train_loss)


def as_dataset(data: Data) -> Dataset:
    """A Dataset from ``(X, y)`` tensors or a Dataset; checks shapes and finiteness."""
    if isinstance(data, DataLoader):
        return data.dataset
    if isinstance(data, Dataset):
        return data
    if not isinstance(data, tuple | list) or len(data) != 2:
        raise ValueError("training data must be an (X, y) pair of tensors, a Dataset or DataLoader")
    x, y = (torch.as_tensor(t) for t in data)
    if len(x) != len(y):
        raise ValueError(f"X has {len(x)} rows but y has {len(y)}")
    if len(x) == 0:
        raise ValueError("training data is empty")
    for name, t in (("X", x), ("y", y)):
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise ValueError(f"{name} contains {int((~torch.isfinite(t)).sum())} non-finite values")
    if x.is_floating_point():
        x = x.float()
    return TensorDataset(x, y.float() if y.is_floating_point() else y)


def as_loader(
    data: Data, batch_size: int, *, shuffle: bool, seed: int = 0, drop_last: bool | None = None
) -> DataLoader:
    """A DataLoader over ``data``; a given DataLoader is returned unchanged.

    ``drop_last`` defaults to True when shuffling more rows than one batch, so batch norm never
    sees a batch of one.
    """
    if isinstance(data, DataLoader):
        return data
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ds = as_dataset(data)
    if drop_last is None:
        drop_last = shuffle and len(ds) > batch_size
    gen = torch.Generator().manual_seed(seed)
    if isinstance(ds, TensorDataset):
        # in-memory rows: index a whole batch at once instead of row by row and stacking (about
        # 3x less loader time per batch); the same batches in the same order as the row-wise
        # loader, since the sampler and the loader draw from ``gen`` exactly as it does
        order = RandomSampler(ds, generator=gen) if shuffle else SequentialSampler(ds)
        batches = BatchSampler(order, batch_size, drop_last)
        return DataLoader(ds, batch_size=None, sampler=batches, generator=gen)
    return DataLoader(
        ds, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, generator=gen
    )


def loader_batch_size(loader: DataLoader) -> int | None:
    """The rows per batch a DataLoader yields (its ``batch_size``, or its batch sampler's);
    None when it does not say."""
    if loader.batch_size is not None:
        return loader.batch_size
    return getattr(loader.batch_sampler or loader.sampler, "batch_size", None)


def make_optimizer(
    groups: list[dict], name: OptimizerName | str, lr: float, momentum: float = 0.9
) -> torch.optim.Optimizer:
    """Adam, AdamW or SGD (with momentum) over parameter groups."""
    name = parse_option(OptimizerName, name, option="optimizer")
    if name is OptimizerName.SGD:
        return torch.optim.SGD(groups, lr=lr, momentum=momentum)
    adam = torch.optim.AdamW if name is OptimizerName.ADAMW else torch.optim.Adam
    # torch's fused kernel updates every tensor in one call (CPU and CUDA): several times faster
    # than the per-tensor loop on CPU, same arithmetic; it needs floating-point parameters.
    groups = [  # generators can be read only once; a lone tensor is one parameter
        {**g, "params": [g["params"]] if isinstance(g["params"], Tensor) else list(g["params"])}
        for g in groups
    ]
    params = [p for g in groups for p in g["params"]]
    fused = bool(params) and all(
        p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params
    )
    return adam(groups, lr=lr, fused=fused or None)


def train_loop(
    model: nn.Module,
    objective: Objective,
    loader: DataLoader,
    optimizer: torch.optim.Optimizer,
    *,
    epochs: int,
    validate: Callable[[], float] | None = None,
    patience: int | None = None,
    after_step: Callable[[], None] | None = None,
    device: torch.device | None = None,
    progress: bool = True,
    desc: str = "train",
    on_epoch: Callable[[int], None] | None = None,
) -> History:
    """Minimise ``objective`` over ``epochs`` passes of ``loader``.

    With ``validate`` (a score, lower is better) the best epoch's weights are restored at the
    end, and training stops after ``patience`` epochs without improvement when given.
    ``after_step`` runs after every optimiser step (e.g. a projection of weights);
    ``on_epoch(epoch)`` before every epoch (e.g. a distributed sampler's ``set_epoch``).
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    device = device or next(model.parameters()).device
    history = History()
    best, best_state, stale = math.inf, None, 0
    steps = max(len(loader), 1)
    bar = progress_bar(range(epochs), desc=desc, progress=progress, leave=False)
    for epoch in bar:
        if on_epoch is not None:
            on_epoch(epoch)
        model.train()
        total, count = 0.0, 0
        for i, (xb, yb) in enumerate(loader):
            xb, yb = xb.to(device), yb.to(device)
            loss = objective(xb, yb, (epoch + i / steps) / epochs)
            value = loss.item()  # one read of the loss serves the check and the history
            if not math.isfinite(value):
                raise FloatingPointError(
                    f"training loss became {value} at epoch {epoch}; lower the learning rate"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if after_step is not None:
                after_step()
            total += value * len(xb)
            count += len(xb)
        history.train_loss.append(total / max(count, 1))
        postfix = {"loss": f"{history.train_loss[-1]:.4g}"}
        if validate is not None:
            model.eval()
            with torch.no_grad():
                score = float(validate())
            history.val_loss.append(score)
            postfix["val"] = f"{score:.4g}"
            if score < best:
                best, stale, history.best_epoch = score, 0, epoch
                best_state = copy.deepcopy(model.state_dict())
            else:
                stale += 1
                if patience is not None and stale >= patience:
                    history.stopped_early = True
                    bar.set_postfix(postfix)
                    break
        bar.set_postfix(postfix)
        log.debug("epoch %d: %s", epoch, postfix)
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return history
