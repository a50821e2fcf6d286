"""The face every posterior approximation shares: ``fit``, ``predict``, ``save``/``load``.

A method wraps a network, owns its training objective, and predicts with T Monte Carlo samples in
one vectorised pass over ``T*N`` rows. It returns a :class:`~bayesify.predictive.Predictive`.

Memory is bounded by ``max_rows`` rows per forward: while T <= ``max_rows`` the N rows are split
into chunks of ``max_rows // T``; beyond that the T groups are split too, into ranges of
``max_rows`` groups run alone (``select_groups``) over one data row at a time. Every stochastic
layer draws per (group, data row), so the chunked samples equal the one-pass samples.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader

from bayesify.data.preprocessing import Preprocessing
from bayesify.io import write_bundle
from bayesify.metrics import fit_constant_std
from bayesify.models.architecture import architecture_spec, net_class_name
from bayesify.nn import repeat_samples, sampling, select_groups
from bayesify.posthoc.noise import NoiseObjective, fit_noise_variance
from bayesify.predictive import Predictive, Task
from bayesify.train import (
    Data,
    History,
    as_dataset,
    as_loader,
    loader_batch_size,
    make_optimizer,
    train_loop,
)

log = logging.getLogger(__name__)

MaxRows = int | Literal["auto"] | None
DEFAULT_MAX_ROWS: MaxRows = "auto"
#: ``max_rows="auto"``: input numbers per forward on CPU, and the bounds on rows per forward
AUTO_CPU_INPUT_NUMBERS, AUTO_CPU_ROWS, AUTO_CUDA_ROWS = 2**17, (64, 1024), 8192


def resolve_max_rows(max_rows: MaxRows, x: Tensor) -> int | None:
    """Rows per forward pass for inputs ``x [N, ...]``: an int as given (None or 0: no limit).

    ``"auto"``: on CUDA 8192 rows; elsewhere about 2**17 input numbers per forward, between 64
    and 1024 rows (a LeNet image: 167 rows; a UCI row: 1024). Measured on CPU, larger forwards
    run out of cache and cost more per row than they save in calls (benchmarks/speed.md).
    """
    if max_rows != "auto":
        if max_rows is not None and (not isinstance(max_rows, int) or max_rows < 0):
            raise ValueError(f'max_rows must be a positive int, None or "auto", got {max_rows!r}')
        return max_rows or None
    if x.device.type == "cuda":
        return AUTO_CUDA_ROWS
    lo, hi = AUTO_CPU_ROWS
    return min(hi, max(lo, AUTO_CPU_INPUT_NUMBERS // max(1, x[0].numel() if len(x) else 1)))


def chunk_plan(
    k: int, n: int, max_rows: int | None, factor: int = 1
) -> tuple[list[tuple[int, int]], int]:
    """Group ranges and data rows per forward for ``k`` sample groups over ``n`` rows, so that
    ``factor * groups * rows <= max_rows`` (``factor``: networks run together per row, e.g. an
    ensemble's members under vmap). Up to ``max_rows`` groups the N rows are chunked; beyond,
    the groups are split into ranges run over one data row at a time."""
    if not max_rows:
        return [(0, k)], max(1, n)
    if k * factor <= max_rows:
        return [(0, k)], max(1, max_rows // (k * factor))
    width = max(1, max_rows // factor)
    return [(a, min(a + width, k)) for a in range(0, k, width)], 1


def forward_in_chunks(
    net: nn.Module,
    x: Tensor,
    ranges: list[tuple[int, int]],
    per_chunk: int,
    forward: Callable[[Tensor], Tensor],
    group_dim: int,
) -> Tensor:
    """``forward`` over every group range (``select_groups`` on ``net`` when there are several)
    and row chunk of ``x``, inside an open sampling block; outputs joined along the group axis
    ``group_dim`` (0: ``[K, N, ...]``; 1: stacked members ``[M, K, N, ...]``)."""
    parts = []
    for a, b in ranges:
        if len(ranges) > 1:
            select_groups(net, a, b)
        chunks = []
        for chunk in x.split(per_chunk):
            out = forward(repeat_samples(chunk, b - a))  # [(M,) G*n, ...]
            lead = out.shape[:group_dim]
            chunks.append(out.reshape(*lead, b - a, len(chunk), *out.shape[group_dim + 1 :]))
        parts.append(torch.cat(chunks, dim=group_dim + 1))
    return torch.cat(parts, dim=group_dim)


@dataclass(frozen=True)
class MethodConfig:
    """Options every method has. Subclasses add their own fields."""

    task: Task = Task.REGRESSION
    # what τ is fitted for on validation data (regression). PLL is the safe default: a τ fitted
    # for CRPS can shrink to ~0 when the epistemic spread alone scores well, and the mixture PLL
    # of near-delta samples is then meaningless. Teye et al. fit τ for CRPS.
    noise_objective: NoiseObjective = NoiseObjective.PLL
    noise_samples: int = 50  # MC samples used when fitting τ on validation data

    def __post_init__(self) -> None:
        for name, kind in (("task", Task), ("noise_objective", NoiseObjective)):
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, kind(value))
            except ValueError:
                valid = ", ".join(k.value for k in kind)
                raise ValueError(f"unknown {name} {value!r}; valid: {valid}") from None

    def _require(self, names: tuple[str, ...], ok: Callable[[Any], bool], what: str) -> None:
        """Raise ``ValueError("<name> must be <what>, got <value>")`` for the first bad field."""
        for name in names:
            if not ok(getattr(self, name)):
                raise ValueError(f"{name} must be {what}, got {getattr(self, name)}")

    def to_dict(self) -> dict[str, Any]:
        return {k: (v.value if hasattr(v, "value") else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MethodConfig:
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(
                f"unknown {cls.__name__} option(s) {sorted(unknown)}; valid: {sorted(names)}"
            )
        return cls(**d)


def _seeded_generator(
    generator: torch.Generator | None, seed: int | None
) -> torch.Generator | None:
    if seed is not None:
        if generator is not None:
            raise ValueError("give either generator or seed, not both")
        return torch.Generator().manual_seed(seed)
    return generator


class Method:
    """Base class: a network plus the randomness used to sample its predictive distribution."""

    name: ClassVar[str] = "method"
    Config: ClassVar[type[MethodConfig]] = MethodConfig

    def __init__(self, net: nn.Module, config: MethodConfig | None = None, **options: Any):
        if not isinstance(net, nn.Module):
            raise TypeError(
                f"{type(self).__name__} wraps a torch.nn.Module, got {type(net).__name__}"
            )
        if config is None:
            config = self.Config.from_dict(options)
        elif options:
            config = replace(config, **options)
        if not isinstance(config, self.Config):
            raise TypeError(f"{type(self).__name__} takes a {self.Config.__name__}")
        self.config = config
        self.net = net
        self._noise_variance = 1.0  # τ⁻¹ for regression, in training target units
        self.noise_fitted = False  # whether τ⁻¹ was fitted, learned or set (else 1.0 is a guess)
        self.constant_variance: float | None = None  # the constant-uncertainty baseline's
        self.input_shape: tuple[int, ...] | None = None
        self.metadata: dict[str, Any] = {}  # free JSON (e.g. data standardisation), saved
        # raw user inputs -> network inputs and regression outputs -> user units, in predict()
        self.preprocessing: Preprocessing | None = None
        self.history: History | None = None
        # how a bundle rebuilds the network as handed in (before surgery); None: user's code
        self.architecture, self.network_class = architecture_spec(net), net_class_name(net)
        self._prepare(net)

    @property
    def noise_variance(self) -> float:
        """τ⁻¹, the regression noise variance added to every sample (training target units)."""
        return self._noise_variance

    @noise_variance.setter
    def noise_variance(self, value: float) -> None:
        self._noise_variance = float(value)
        self.noise_fitted = True

    # ------------------------------------------------------------------ hooks for methods
    def _prepare(self, net: nn.Module) -> None:
        """Model surgery at construction (swap layers, add noise)."""

    def objective(self, x: Tensor, y: Tensor, progress: float, n_data: int) -> Tensor:
        """Training loss on one mini-batch; default is the negative log-likelihood."""
        return self.nll(self.net(x), y)

    def nll(self, out: Tensor, y: Tensor) -> Tensor:
        """Mean data term: squared error (regression) or cross-entropy (classification)."""
        if self.config.task is Task.CLASSIFICATION:
            return F.cross_entropy(out, y.long())
        if out.numel() != y.numel():
            raise ValueError(
                f"a regression net must output [N] or [N, 1], got {list(out.shape)} for "
                f"{y.numel()} targets; for class scores pass task='classification'"
            )
        return F.mse_loss(out.reshape(y.shape), y)

    def param_groups(self, lr: float, weight_decay: float) -> list[dict]:
        """Optimiser parameter groups; methods override to give variational parameters their own."""
        return [
            {
                "params": [p for p in self.net.parameters() if p.requires_grad],
                "weight_decay": weight_decay,
            }
        ]

    def after_step(self) -> None:
        """Runs after every optimiser step (projections, clamps)."""

    def _after_fit(self, train: Data, batch_size: int, seed: int) -> None:
        """Runs once after training on the training data (e.g. fill a statistics bank)."""

    @contextmanager
    def sampling(self, samples: int, generator: torch.Generator | None) -> Iterator[None]:
        """Turn the network's randomness on for ``samples`` groups; methods may draw first."""
        with sampling(self.net, samples, generator):
            yield

    # ------------------------------------------------------------------ training
    def fit(
        self,
        train: Data,
        val: Data | None = None,
        *,
        epochs: int = 100,
        batch_size: int = 32,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        optimizer: str = "adam",
        patience: int | None = None,
        seed: int = 0,
        device: str | torch.device | None = None,
        progress: bool = True,
    ) -> Method:
        """Train on ``train`` (``(X, y)`` tensors, a Dataset or a DataLoader); returns ``self``.

        A DataLoader is used as it is: its batch size, not ``batch_size``, is the training batch
        size (which e.g. MCBN's bank then matches). With ``val``, the epoch with the best
        validation loss is kept (early stopping after ``patience`` stale epochs) and, for
        regression, τ is fitted on it afterwards.
        """
        if device is not None:
            self.net.to(device)
        dev = self.device
        loader = as_loader(train, batch_size, shuffle=True, seed=seed)
        if isinstance(train, DataLoader):
            batch_size = loader_batch_size(loader) or batch_size
        n_data = len(loader.dataset)
        self._remember_input_shape(loader.dataset)
        opt = make_optimizer(self.param_groups(lr, weight_decay), optimizer, lr)
        validate = None
        if val is not None:
            xv, yv = self._tensors(val)
            xv, yv = xv.to(dev), yv.to(dev)
            validate = lambda: float(self.nll(self.net(xv), yv))  # noqa: E731
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
            torch.manual_seed(seed)
            self.history = train_loop(
                self.net,
                lambda x, y, p: self.objective(x, y, p, n_data),
                loader,
                opt,
                epochs=epochs,
                validate=validate,
                patience=patience,
                after_step=self.after_step,
                device=dev,
                progress=progress,
                desc=f"{self.name} train",
            )
            self._after_fit(train, batch_size, seed)
        if val is not None and self.config.task is Task.REGRESSION:
            self.fit_noise(val, seed=seed)
        return self

    def fit_noise(self, val: Data, *, seed: int = 0) -> float:
        """Fit τ⁻¹ on validation data for ``config.noise_objective``; returns it (regression)."""
        if self.config.task is not Task.REGRESSION:
            raise ValueError("the noise variance τ⁻¹ is a regression parameter")
        xv, yv = self._tensors(val)
        means = self._regression_outputs(self.sample(xv, self.config.noise_samples, seed=seed))
        self.noise_variance = fit_noise_variance(means, yv, self.config.noise_objective)
        std = fit_constant_std(means.mean(0), yv, self.config.noise_objective.value)
        self.constant_variance = float(std) ** 2
        return self.noise_variance

    def constant_baseline(self, pred: Predictive) -> Predictive:
        """The constant-uncertainty baseline (CUBN / CUDO) for a regression predictive: same mean,
        the constant variance fitted on validation data by :meth:`fit_noise`."""
        if self.constant_variance is None:
            raise RuntimeError("fit with validation data (or call fit_noise) before the baseline")
        return pred.constant_uncertainty(self.constant_variance)

    # ------------------------------------------------------------------ prediction
    @property
    def device(self) -> torch.device:
        for t in self.net.parameters():
            return t.device
        return torch.device("cpu")

    def sample(
        self,
        x: Tensor,
        samples: int = 50,
        *,
        generator: torch.Generator | None = None,
        seed: int | None = None,
        max_rows: MaxRows = DEFAULT_MAX_ROWS,
    ) -> Tensor:
        """Raw network outputs for T samples in one pass: ``[T, N, ...]``.

        ``max_rows`` bounds the rows of every forward (None: one forward over all ``T*N``
        rows; ``"auto"``: see :func:`resolve_max_rows`). Up to ``max_rows`` samples, the N
        inputs are split into chunks; more samples are split into ranges of ``max_rows`` groups
        as well. The result does not depend on it.
        """
        x, generator = self._sample_inputs(x, samples, generator, seed)
        max_rows = resolve_max_rows(max_rows, x)
        self.net.eval()
        ranges, per_chunk = chunk_plan(samples, len(x), max_rows)
        with torch.no_grad(), self.sampling(samples, generator):
            return forward_in_chunks(self.net, x, ranges, per_chunk, self.net, group_dim=0)

    def _sample_inputs(
        self, x: Tensor, samples: int, generator: torch.Generator | None, seed: int | None
    ) -> tuple[Tensor, torch.Generator | None]:
        """Checked inputs and the generator to draw with (from ``seed`` if given)."""
        if not isinstance(samples, int) or samples < 1:
            raise ValueError(f"samples must be a positive integer, got {samples!r}")
        return self._check_inputs(x), _seeded_generator(generator, seed)

    def predict(
        self,
        x: Tensor,
        samples: int | Literal["adaptive"] = 50,
        *,
        generator: torch.Generator | None = None,
        seed: int | None = None,
        max_rows: MaxRows = DEFAULT_MAX_ROWS,
        **adaptive: Any,
    ) -> Predictive:
        """The predictive distribution at ``x [N, ...]`` from T samples, in one vectorised pass.

        With ``preprocessing`` set (bundles trained from a table), ``x`` is in the user's raw
        units and the regression predictive comes back in the user's target units.
        ``samples="adaptive"`` (with ``tol``, ``start``, ``max_samples``): more samples only
        for rows whose Monte Carlo standard error is above ``tol`` (:mod:`.adaptive`).
        """
        prep = self.preprocessing
        if prep is not None:
            x = prep.inputs(x)
        if samples == "adaptive" or adaptive:
            from bayesify.methods.adaptive import predict_adaptive

            back = prep.outputs if prep is not None else None
            return predict_adaptive(self, x, samples, generator=generator, seed=seed,
                                    max_rows=max_rows, outputs=back, **adaptive)  # fmt: skip
        out = self.sample(x, samples, generator=generator, seed=seed, max_rows=max_rows)
        pred = self.to_predictive(out)
        return pred if prep is None else prep.outputs(pred)

    def to_predictive(self, out: Tensor) -> Predictive:
        """Raw outputs ``[T, N, ...]`` -> Predictive (softmax for classification)."""
        if self.config.task is Task.CLASSIFICATION:
            return Predictive.from_logits(out)
        if not self.noise_fitted:
            warnings.warn(
                f"{type(self).__name__}: the noise variance τ⁻¹ was never fitted, so the "
                "predictive adds 1.0 (training target units) to every sample; pass val= to "
                "fit()/from_pretrained() or call fit_noise(val)",
                UserWarning,
                stacklevel=3,
            )
        return Predictive.regression(self._regression_outputs(out), self.noise_variance)

    @staticmethod
    def _regression_outputs(out: Tensor) -> Tensor:
        """A regression net's samples ``[T, N]`` from its outputs ``[T, N]`` or ``[T, N, 1]``."""
        if out.dim() == 3 and out.shape[-1] != 1:
            raise ValueError(
                f"a regression net must output [N] or [N, 1], got [N, {out.shape[-1]}]"
            )
        return out.reshape(out.shape[0], out.shape[1])

    # ------------------------------------------------------------------ input checks
    def _tensors(self, data: Data) -> tuple[Tensor, Tensor]:
        ds = as_dataset(data)
        if isinstance(data, tuple | list):
            return ds.tensors[0].to(self.device), ds.tensors[1].to(self.device)
        xs, ys = zip(*[ds[i] for i in range(len(ds))], strict=True)
        return torch.stack(xs).to(self.device), torch.stack([torch.as_tensor(y) for y in ys]).to(
            self.device
        )

    def _remember_input_shape(self, ds: Any) -> None:
        self.input_shape = tuple(ds[0][0].shape)

    def _check_inputs(self, x: Tensor) -> Tensor:
        x = torch.as_tensor(x, device=self.device)
        dtype = next((p.dtype for p in self.net.parameters()), torch.get_default_dtype())
        if x.dtype != dtype:  # e.g. numpy's float64 or integer inputs for a float32 network
            x = x.to(dtype)
        if self.input_shape is not None and tuple(x.shape[1:]) != self.input_shape:
            raise ValueError(
                f"inputs must have shape [N, {', '.join(map(str, self.input_shape))}], "
                f"got {list(x.shape)}"
            )
        if x.dim() == 0 or len(x) == 0:
            raise ValueError("inputs must be a non-empty batch [N, ...]")
        if not torch.isfinite(x).all():
            raise ValueError(f"inputs contain {int((~torch.isfinite(x)).sum())} non-finite values")
        return x

    # ------------------------------------------------------------------ bundles
    def extra_state(self) -> dict[str, Any]:
        """JSON-able state beyond the network's weights, saved in bundles."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` saved."""

    def save(self, path: str | Path) -> Path:
        """Write a bundle folder: ``weights.safetensors`` + ``config.json`` (never pickle).

        The network is rebuilt on load from its factory spec (our model factories record it) or,
        for an ``nn.Sequential`` of standard torch layers, from its JSON layer list; any other
        network is passed again to :func:`bayesify.load` as ``net=``.
        """
        spec = getattr(self.net, "bayesify_spec", None) or self.architecture
        config = {
            "method": self.name,
            "config": self.config.to_dict(),
            "model": spec,
            "network_class": self.network_class,
            "noise_variance": self.noise_variance,
            "noise_fitted": self.noise_fitted,
            "constant_variance": self.constant_variance,
            "input_shape": list(self.input_shape) if self.input_shape is not None else None,
            "metadata": self.metadata,
            "preprocessing": self.preprocessing.to_dict() if self.preprocessing else None,
            "extra": self.extra_state(),
        }
        return write_bundle(path, self.net.state_dict(), config)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config})"
