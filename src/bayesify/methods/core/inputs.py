"""What every method accepts as inputs, targets, sample counts and devices, checked in one place.

Each check turns a mistake into a one-line ``ValueError`` that names the problem, instead of a
torch traceback from deep inside a layer or, worse, silently wrong numbers.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from bayesify.nn import StochasticModule
from bayesify.options import shown
from bayesify.train import Data, as_dataset


def check_samples(samples: Any) -> int:
    """``samples`` as a positive int; a bool, a float or a count below 1 is refused."""
    if type(samples) is int and samples >= 1:  # the common case, before the ABC check
        return samples
    if isinstance(samples, bool) or not isinstance(samples, numbers.Integral) or samples < 1:
        kind = " (a bool)" if isinstance(samples, bool) else ""
        raise ValueError(f"samples must be a positive integer, got {shown(samples)}{kind}")
    return int(samples)


def check_device(device: str | torch.device) -> torch.device:
    """``device`` as a torch.device that this machine has (CUDA asked for without CUDA: error)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {device!r}; e.g. 'cpu', 'cuda', 'cuda:0'") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {str(device)!r} asked for, but this PyTorch build sees no CUDA device "
                "(torch.cuda.is_available() is False); use device='cpu'"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {str(device)!r} asked for, but there are only "
                f"{torch.cuda.device_count()} CUDA device(s)"
            )
    return dev


def input_rows(x: Any) -> Any:
    """Inputs ``[N, ...]`` from a tensor/array, or from a Dataset or DataLoader (its dataset, in
    dataset order whatever the loader's sampler; the inputs of ``(x, y)`` items, targets
    ignored)."""
    if isinstance(x, DataLoader):
        x = x.dataset
    if not isinstance(x, Dataset):
        return x
    tensors = getattr(x, "tensors", None)
    if isinstance(tensors, tuple) and tensors:  # a TensorDataset: no row-by-row stacking
        return tensors[0]
    if len(x) == 0:  # type: ignore[arg-type]
        raise ValueError("inputs must be a non-empty batch [N, ...]; the dataset is empty")
    rows = [x[i] for i in range(len(x))]  # type: ignore[arg-type]
    rows = [r[0] if isinstance(r, tuple | list) else r for r in rows]
    return torch.stack([torch.as_tensor(r) for r in rows])


def data_tensors(data: Data) -> tuple[Tensor, Tensor]:
    """``(X, y)`` tensors from ``(X, y)``, a Dataset or a DataLoader (its dataset, in order)."""
    ds = as_dataset(data)
    tensors = getattr(ds, "tensors", None)
    if isinstance(tensors, tuple) and len(tensors) == 2:
        return tensors[0], tensors[1]
    xs, ys = zip(*[ds[i] for i in range(len(ds))], strict=True)
    return torch.stack([torch.as_tensor(x) for x in xs]), torch.stack(
        [torch.as_tensor(y) for y in ys]
    )


def regression_targets(y: Tensor) -> Tensor:
    """Regression targets ``[N]`` from ``[N]`` or ``[N, 1]`` (float, real)."""
    y = as_input_tensor(y, "regression targets")
    if y.dim() == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.dim() != 1:
        raise ValueError(
            f"regression targets must have shape [N] or [N, 1], got {list(y.shape)} (several "
            "outputs per row are not supported: fit one method per target column)"
        )
    return y if y.is_floating_point() else y.float()


def class_labels(y: Tensor, classes: int | None = None) -> Tensor:
    """Class labels ``[N]`` (long) from ``[N]`` or ``[N, 1]``: whole numbers in 0..C−1."""
    y = as_input_tensor(y, "class labels")
    if y.dim() == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.dim() != 1:
        raise ValueError(f"class labels must have shape [N] or [N, 1], got {list(y.shape)}")
    if y.is_floating_point():
        whole = torch.isfinite(y) & (y == y.round())
        if not whole.all():
            bad = y[~whole][:5].tolist()
            raise ValueError(f"class labels must be whole numbers, got {bad}")
    labels = y.long()
    top = "" if classes is None else f"..{classes - 1}"
    out = (labels < 0) if classes is None else (labels < 0) | (labels >= classes)
    if out.any():
        bad = labels[out][:5].tolist()
        raise ValueError(
            f"class labels must be in 0{top}"
            + ("" if classes is None else f" (the network has {classes} outputs)")
            + f", got {bad}"
        )
    return labels


def seeded_generator(generator: torch.Generator | None, seed: int | None) -> torch.Generator | None:
    """A generator seeded with ``seed`` when given, else ``generator`` (not both)."""
    if seed is not None:
        if generator is not None:
            raise ValueError("give either generator or seed, not both")
        return torch.Generator().manual_seed(seed)
    return generator


def as_input_tensor(x: Any, what: str = "inputs") -> Tensor:
    """``x`` as a tensor of real numbers (``what`` names it in errors): complex numbers and
    arrays of text or objects are refused in one line instead of a torch error or, for complex
    numbers, a silent cast that drops the imaginary part."""
    try:
        t = x if isinstance(x, Tensor) else torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError):
        kind = getattr(getattr(x, "dtype", None), "name", None) or type(x).__name__
        raise ValueError(
            f"{what} must be numbers (a tensor or a numeric array), got {kind}; a table with "
            "text columns is read through a bundle's preprocessing (bayesify train --data)"
        ) from None
    if t.is_complex():
        raise ValueError(
            f"{what} are complex ({str(t.dtype).removeprefix('torch.')}); bayesify takes real "
            "numbers: pass the real values you mean (e.g. x.real, x.abs())"
        )
    return t


def check_inputs(
    x: Any,
    device: torch.device | None,
    dtype: torch.dtype,
    input_shape: tuple[int, ...] | None,
    what: str = "inputs",
) -> Tensor:
    """Inputs ``[N, ...]`` (a tensor or array, or a Dataset/DataLoader's inputs) on ``device``
    (None: where they are) in ``dtype``, checked for real numbers, the row shape
    ``input_shape`` (when known) and finiteness; ``what`` names them in errors."""
    x = as_input_tensor(input_rows(x), what)
    if device is not None and x.device != device:
        x = x.to(device)
    if x.dtype != dtype:  # e.g. numpy's float64 or integer inputs for a float32 network
        x = x.to(dtype)
    if input_shape is not None and tuple(x.shape[1:]) != input_shape:
        raise ValueError(
            f"{what} must have shape [N, {', '.join(map(str, input_shape))}], got {list(x.shape)}"
        )
    if x.dim() == 0 or len(x) == 0:
        raise ValueError(f"{what} must be a non-empty batch [N, ...]")
    # a finite sum: every number is finite (one reduction); else the element-wise check
    if not math.isfinite(float(x.sum())) and not torch.isfinite(x).all():
        raise ValueError(f"{what} contain {int((~torch.isfinite(x)).sum())} non-finite values")
    return x


def check_dataset_row(x0: Any, what: str) -> Tensor:
    """The first input row of a Dataset used for training: real numbers, and floating point
    (its batches reach the network as they are, so integers cannot be cast here)."""
    t = as_input_tensor(x0, what)
    if not t.is_floating_point():
        dtype = str(t.dtype).removeprefix("torch.")
        raise ValueError(
            f"{what} are {dtype}; the network takes floating-point inputs: convert the dataset's "
            "inputs (e.g. x.float()) or pass (X, y) tensors, which are cast"
        )
    return t


def check_row_target(y0: Any, classification: bool) -> None:
    """One target (class label) per row: a row's ``y`` holds a single number."""
    y0 = torch.as_tensor(y0)
    if y0.numel() != 1:
        kind = "class label" if classification else "target"
        raise ValueError(
            f"each row needs one {kind} (y of shape [N] or [N, 1]), got rows of "
            f"shape {list(y0.shape)}"
        )


def _leading_layers(net: nn.Module) -> Iterator[nn.Module]:
    """The layers an ``nn.Sequential`` runs first, nested Sequentials opened, in order."""
    if isinstance(net, nn.Sequential):
        for child in net:
            yield from _leading_layers(child)
    else:
        yield net


def check_first_layer(net: nn.Module, row_shape: tuple[int, ...], what: str) -> None:
    """Inputs with rows of ``row_shape`` against the first ``nn.Linear`` or convolution of an
    ``nn.Sequential`` (after layers that keep the shape: dropout, parameter-free noise,
    ``nn.Flatten``): features or channels it cannot take are a one-line error before training.
    Other networks, or a first layer of another kind, are not checked (nothing is run)."""
    flat = False
    for layer in _leading_layers(net):
        if isinstance(layer, nn.Flatten):
            flat = True
        elif isinstance(layer, nn.Linear):
            got = math.prod(row_shape) if flat else (row_shape[-1] if row_shape else 1)
            if got != layer.in_features:
                raise ValueError(
                    f"{what} have {got} feature(s) per row; the network's first layer "
                    f"(nn.Linear) takes {layer.in_features}"
                )
            return
        elif isinstance(layer, nn.Conv1d | nn.Conv2d | nn.Conv3d):
            dims = len(layer.kernel_size)  # a subclass too (a parametrized weight's layer)
            if len(row_shape) != dims + 1 or row_shape[0] != layer.in_channels:
                shape = ", ".join(["N", *map(str, row_shape)])
                raise ValueError(
                    f"{what} of shape [{shape}] do not fit the network's first layer "
                    f"(nn.Conv{dims}d of {layer.in_channels} channels)"
                )
            return
        elif any(True for _ in layer.parameters()) or not isinstance(
            layer,
            nn.Dropout
            | nn.Dropout1d
            | nn.Dropout2d
            | nn.Dropout3d
            | nn.Identity
            | StochasticModule,
        ):
            return  # a layer whose input width is not known here


def same_architecture(nets: list[nn.Module], what: str) -> list[nn.Module]:
    """``nets`` if they are modules with the same parameter and buffer names and shapes (the
    networks handed to an ``what``, e.g. an ensemble or a MultiSWAG, as its members)."""
    if not nets or not all(isinstance(n, nn.Module) for n in nets):
        raise TypeError(f"the networks of a {what} must be a non-empty list of nn.Module")
    shapes = [{k: tuple(v.shape) for k, v in n.state_dict().items()} for n in nets]
    for m, s in enumerate(shapes[1:], 1):
        if s != shapes[0]:
            diff = sorted(set(s.items()) ^ set(shapes[0].items()))[:3]
            raise ValueError(
                f"{what} member {m} differs from member 0 in architecture ({diff}); "
                "members must share one architecture"
            )
    return nets


def given_members(
    net: Any, config: Any, options: dict[str, Any], what: str
) -> list[nn.Module] | None:
    """The networks of a list/tuple ``net`` handed to a ``what`` as its members (checked by
    :func:`same_architecture`; ``members``, given in ``options`` or ``config``, must be their
    number, and is set in ``options`` when neither gives it), or None for one network."""
    if not isinstance(net, list | tuple):
        return None
    nets = same_architecture(list(net), what)
    if options.get("members", len(nets)) != len(nets) or (
        config is not None and config.members != len(nets)
    ):
        raise ValueError(f"members must equal the {len(nets)} networks given")
    if config is None:
        options["members"] = len(nets)
    return nets
