"""Training and evaluation jobs on named datasets, shared by the CLI and the server."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from bayesify import metrics
from bayesify.bench.scores import NoiseFit, regression_scores
from bayesify.data import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    UCI_DATASETS,
    load_fashion_mnist,
    load_uci,
)
from bayesify.data.preprocessing import Preprocessing
from bayesify.methods import Method, get_method, resolve_method_names
from bayesify.models import lenet, mlp, resnet
from bayesify.predictive import Task
from bayesify.seeding import seeded

IMAGE_DATASETS = ("fashion-mnist",)
REGRESSION_KEYS = ["rmse", "pll", "crps", "pll_norm", "crps_norm"]
CLASSIFICATION_KEYS = ["error", "nll", "ece", "brier", "mean_mi"]
#: dropout rate of the model when MC dropout is asked for without one (Gal & Ghahramani's UCI
#: grid is {0.005, 0.01, 0.05, 0.1}); other methods default to no dropout
MC_DROPOUT_RATE = 0.05


def default_dropout(cls: type[Method], options: dict[str, Any]) -> float:
    """The model's dropout rate when none is given: :data:`MC_DROPOUT_RATE` for MC dropout,
    alone or as the member method of an ensemble or TTA (``options["method"]``), else 0."""
    member = options.get("method")
    names = {cls.name, getattr(member, "name", None)}
    return MC_DROPOUT_RATE if "mc-dropout" in names else 0.0


@dataclass
class Job:
    """A method with its data: training/validation parts and the test set it is scored on."""

    method: Method
    test: tuple[Tensor, Tensor]
    train: tuple[Tensor, Tensor] | None = None
    val: tuple[Tensor, Tensor] | None = None
    loc: float = 0.0  # regression targets: original = loc + scale * model units
    scale: float = 1.0
    metadata: dict[str, Any] = field(default_factory=dict)
    #: raw inputs -> network inputs and outputs -> original units, saved in the bundle
    preprocessing: Preprocessing | None = None

    @property
    def score_keys(self) -> list[str]:
        if self.method.config.task is Task.REGRESSION:
            return REGRESSION_KEYS
        return CLASSIFICATION_KEYS

    def evaluate(
        self, samples: int = 100, seed: int = 0, limit: int | None = None
    ) -> dict[str, float]:
        """Test-set scores (regression in original target units); ``limit``: only the first
        ``limit`` test rows (a quick look at a large test set)."""
        x, y = self.test
        if limit is not None:
            if limit < 1:
                raise ValueError(f"limit must be >= 1, got {limit}")
            x, y = x[:limit], y[:limit]
        # the test tensors are in network units: sample without the bundle's preprocessing
        pred = self.method.to_predictive(self.method.sample(x, samples, seed=seed))
        if self.method.config.task is Task.CLASSIFICATION:
            probs = pred.mean
            return {
                "error": metrics.error_rate(probs, y).item(),
                "nll": metrics.nll(probs, y).item(),
                "ece": metrics.expected_calibration_error(probs, y).item(),
                "brier": metrics.brier_score(probs, y).item(),
                "mean_mi": pred.mutual_information.mean().item(),
            }
        nv = self.method.noise_variance
        cv = self.method.constant_variance if self.method.constant_variance is not None else nv
        fit = NoiseFit(noise_pll=nv, noise_crps=nv, constant_pll=cv, constant_crps=cv)
        y_orig = (self.loc + self.scale * y.double()).to(pred.samples.dtype)
        return regression_scores(pred, y_orig, fit, loc=self.loc, scale=self.scale)["MC"]


def _check_data(data: str) -> None:
    if data not in UCI_DATASETS and data not in IMAGE_DATASETS:
        valid = ", ".join([*UCI_DATASETS, *IMAGE_DATASETS])
        raise ValueError(f"unknown dataset {data!r}; valid: {valid}")


def hidden_sizes(text: str) -> tuple[int, ...]:
    """MLP hidden widths from ``"50,50"``; each a positive integer (none: a linear model)."""
    try:
        sizes = tuple(int(h) for h in text.split(",") if h.strip())
    except ValueError:
        raise ValueError(f"hidden sizes are comma-separated integers, got {text!r}") from None
    if any(h < 1 for h in sizes):
        raise ValueError(f"hidden sizes must be >= 1, got {text!r}")
    return sizes


def _subset_rows(x: Tensor, y: Tensor, limit: int, seed: int) -> tuple[Tensor, Tensor]:
    """``limit`` rows drawn without replacement (seeded), in their original order."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if limit >= len(x):
        return x, y
    g = torch.Generator().manual_seed(seed)
    keep = torch.randperm(len(x), generator=g)[:limit].sort().values
    return x[keep], y[keep]


def build_training(
    method: str,
    data: str,
    *,
    split: int = 0,
    protocol: str = "teye",
    model: str = "",
    hidden: str = "50,50",
    norm: str = "batch",
    dropout: float | None = None,
    limit: int | None = None,
    seed: int = 0,
    options: dict[str, Any] | None = None,
) -> Job:
    """A fresh method on a named dataset, ready to ``fit(job.train, val=job.val)``.

    ``dropout``: the model's dropout rate (None: :data:`MC_DROPOUT_RATE` for MC dropout, else
    0); ``limit``: train on only this many training rows (seeded draw), for quick runs.
    """
    cls = get_method(method)
    options = resolve_method_names(cls.Config, options or {})  # e.g. an ensemble's member
    _check_data(data)
    if dropout is None:
        dropout = default_dropout(cls, options)
    meta: dict[str, Any] = {"data": data}
    if data in UCI_DATASETS:
        if model not in ("", "mlp"):
            raise ValueError(f"UCI datasets use model 'mlp', got {model!r}")
        sizes = hidden_sizes(hidden)
        s = load_uci(data, split, protocol=protocol)
        outputs = 2 if (options or {}).get("likelihood") == "heteroscedastic" else 1  # mean, var
        with seeded(seed):  # the network's initial weights
            net = mlp(s.n_features, outputs, sizes, norm=norm, dropout=dropout)
            meth = cls(net, task="regression", **(options or {}))
        train = (s.x_train, s.y_train)
        if limit is not None:
            train = _subset_rows(*train, limit, seed)
        meta.update(split=split, protocol=protocol, limit=limit)
        prep = Preprocessing(input_shape=[s.n_features], x_mean=s.scaler.x_mean.tolist(),
                             x_std=s.scaler.x_std.tolist(), y_mean=s.scaler.y_mean,
                             y_std=s.scaler.y_std)  # fmt: skip
        return Job(meth, (s.x_test, s.y_test), train, (s.x_val, s.y_val),
                   s.scaler.y_mean, s.scaler.y_std, meta, prep)  # fmt: skip
    model = model or "lenet"
    if model not in ("lenet", "resnet"):
        raise ValueError(f"image models are 'lenet' or 'resnet', got {model!r}")
    with seeded(seed):  # the network's initial weights
        net = lenet(norm=norm, dropout=dropout) if model == "lenet" else resnet()
        meth = cls(net, task="classification", **(options or {}))
    train_set = load_fashion_mnist("train")
    if limit is not None:
        train_set = train_set.subset(limit, seed=seed)
    n_val = max(1, len(train_set) // 10)
    x, y = train_set.x, train_set.y
    test = load_fashion_mnist("test")
    meta.update(limit=limit, seed=seed)
    return Job(meth, (test.x, test.y), (x[n_val:], y[n_val:]), (x[:n_val], y[:n_val]),
               metadata=meta, preprocessing=image_preprocessing())  # fmt: skip


def image_preprocessing() -> Preprocessing:
    """Fashion-MNIST bundles read raw pixels 0..255 ``[N, 1, 28, 28]`` (or flat rows of 784):
    (x / 255 - mean) / std as one affine map, and name their classes."""
    return Preprocessing(input_shape=[1, 28, 28], x_mean=255.0 * FASHION_MNIST_MEAN,
                         x_std=255.0 * FASHION_MNIST_STD,
                         class_names=list(FASHION_MNIST_CLASSES))  # fmt: skip


def job_from_bundle(method: Method) -> Job:
    """The test set a loaded bundle was trained for (from its metadata)."""
    data = method.metadata.get("data")
    if data is None:
        raise ValueError("this bundle records no dataset; pass --data FILE with labelled rows")
    _check_data(data)
    if data in UCI_DATASETS:
        s = load_uci(data, method.metadata.get("split", 0),
                     protocol=method.metadata.get("protocol", "teye"))  # fmt: skip
        return Job(method, (s.x_test, s.y_test), loc=s.scaler.y_mean, scale=s.scaler.y_std,
                   metadata=method.metadata)  # fmt: skip
    test = load_fashion_mnist("test")
    return Job(method, (test.x, test.y), metadata=method.metadata)
