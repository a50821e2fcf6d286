"""The face every posterior approximation shares: ``fit``, ``predict``, ``save``/``load``.

A method wraps a network, owns its training objective, and predicts with T Monte Carlo samples in
one vectorised pass over ``T*N`` rows. It returns a :class:`~bayesify.predictive.Predictive`.

Memory is bounded by ``max_rows`` rows per forward; the folding and chunking are
:mod:`bayesify.nn.folding`'s.
"""

from __future__ import annotations

import copy
import inspect
import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader

from bayesify.io import write_bundle
from bayesify.methods.inputs import (
    check_device,
    check_samples,
    class_labels,
    data_tensors,
    input_rows,
    regression_targets,
)
from bayesify.metrics import fit_constant_std
from bayesify.nn import (
    DEFAULT_MAX_ROWS,
    MaxRows,
    chunk_plan,
    forward_in_chunks,
    resolve_max_rows,
    sampling,
    select_groups,
)
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


def _keyword_options(hook: Callable[..., Any]) -> tuple[set[str], bool]:
    """The method-specific keyword options of a ``_from_pretrained`` hook, and whether it takes
    any keyword (``**kwargs``)."""
    fixed = {"self", "train", "val", "batch_size", "seed", "progress"}
    params = inspect.signature(hook).parameters.values()
    names = {p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name not in fixed}
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


def _seeded_generator(
    generator: torch.Generator | None, seed: int | None
) -> torch.Generator | None:
    if seed is not None:
        if generator is not None:
            raise ValueError("give either generator or seed, not both")
        return torch.Generator().manual_seed(seed)
    return generator


@contextmanager
def kept_modes(module: nn.Module) -> Iterator[None]:
    """Restore every submodule's train/eval flag on leaving the block."""
    modes = [(m, m.training) for m in module.modules()]
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


class Method:
    """Base class: a network plus the randomness used to sample its predictive distribution.

    The method works on a deep copy of ``net`` (``method.net``): wrapping, fitting and
    predicting never change the network, the tensors or the train/eval mode the caller handed
    in. ``inplace=True`` wraps ``net`` itself instead (no copy, for networks too large to copy):
    its layers are then swapped in place and fitting trains it.
    """

    name: ClassVar[str] = "method"
    Config: ClassVar[type[MethodConfig]] = MethodConfig

    def __init__(
        self,
        net: nn.Module,
        config: MethodConfig | None = None,
        *,
        inplace: bool = False,
        **options: Any,
    ):
        if not isinstance(net, nn.Module):
            raise TypeError(
                f"{type(self).__name__} wraps a torch.nn.Module, got {type(net).__name__}"
            )
        if not isinstance(inplace, bool):
            raise TypeError(f"inplace must be True or False, got {inplace!r}")
        if not inplace:
            net = copy.deepcopy(net)
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
        self.history: History | None = None
        self._prepare(net)

    @property
    def noise_variance(self) -> float:
        """τ⁻¹, the regression noise variance added to every sample (training target units)."""
        return self._noise_variance

    @noise_variance.setter
    def noise_variance(self, value: float) -> None:
        self._noise_variance = float(value)
        self.noise_fitted = True

    # ------------------------------------------------------------------ wrapping trained nets
    @classmethod
    def from_pretrained(
        cls,
        net: Any,
        train: Data | None = None,
        *,
        val: Data | None = None,
        task: Task | str = Task.REGRESSION,
        batch_size: int | None = None,
        seed: int = 0,
        progress: bool = False,
        inplace: bool = False,
        **options: Any,
    ) -> Method:
        """Wrap an already-trained network (a copy of it unless ``inplace=True``).

        ``train``: training data where the method needs it (MCBN's statistics bank, IBNN's
        node posterior, optional fine-tuning); ``val``: for regression, τ⁻¹ is fitted on it.
        Both may be ``(X, y)`` tensors, a Dataset or a DataLoader. ``batch_size``: the
        mini-batch size the method uses on ``train`` (for MCBN the size the network was trained
        with; a DataLoader's own batch size is used when it is not given). ``options`` are the
        method's config fields and its own ``from_pretrained`` options (e.g. MCBN's
        ``bank_size``, IBNN's ``epochs``, MC dropout's ``dropout``/``where``); an unknown one is
        a ``ValueError`` listing the valid ones.
        """
        config_names = {f.name for f in fields(cls.Config)}
        hook_names, hook_takes_any = _keyword_options(cls._from_pretrained)
        unknown = sorted(k for k in options if k not in config_names | hook_names)
        if unknown and not hook_takes_any:
            valid = ", ".join(sorted(config_names | hook_names))
            raise ValueError(
                f"unknown option(s) {unknown} for {cls.__name__}.from_pretrained; valid: {valid}"
            )
        config = {k: v for k, v in options.items() if k in config_names}
        hook = {k: v for k, v in options.items() if k not in config_names}
        method = cls(net, inplace=inplace, task=task, **config)
        for data in (train, val):
            if data is not None:
                method._remember_input_shape(as_dataset(data))
                break
        method._from_pretrained(
            train, val, batch_size=batch_size, seed=seed, progress=progress, **hook
        )
        return method

    def _from_pretrained(
        self,
        train: Data | None,
        val: Data | None,
        *,
        batch_size: int | None,
        seed: int,
        progress: bool,
        epochs: int = 0,
        lr: float = 1e-3,
    ) -> None:
        """The method's part of :meth:`from_pretrained` (override it; its keyword options are
        the method's own ``from_pretrained`` options). Here: fine-tune for ``epochs`` on
        ``train`` at ``lr`` when ``epochs > 0`` (default 0: keep the weights); τ on ``val``."""
        if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 0:
            raise ValueError(f"epochs must be an int >= 0, got {epochs!r}")
        if epochs > 0:
            if train is None:
                raise ValueError(f"fine-tuning for epochs={epochs} needs training data (train)")
            bs = batch_size or 32
            self.fit(train, val, epochs=epochs, batch_size=bs, lr=lr, seed=seed, progress=progress)
            return
        self._fit_noise_on(val, seed)

    def _fit_noise_on(self, val: Data | None, seed: int) -> None:
        """Fit τ⁻¹ on ``val`` for regression (nothing without ``val`` or for classification)."""
        if val is not None and self.config.task is Task.REGRESSION:
            self.fit_noise(val, seed=seed)

    # ------------------------------------------------------------------ hooks for methods
    def _prepare(self, net: nn.Module) -> None:
        """Model surgery at construction (swap layers, add noise)."""

    def objective(self, x: Tensor, y: Tensor, progress: float, n_data: int) -> Tensor:
        """Training loss on one mini-batch; default is the negative log-likelihood."""
        return self.nll(self.net(x), y)

    def nll(self, out: Tensor, y: Tensor) -> Tensor:
        """Mean data term: squared error (regression) or cross-entropy (classification)."""
        if self.config.task is Task.CLASSIFICATION:
            return F.cross_entropy(out, class_labels(y, out.shape[-1]))
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
            self.to(device)
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
        yv = regression_targets(yv)
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
    def to(self, device: str | torch.device) -> Method:
        """Move the network (and so every prediction) to ``device``; returns ``self``. Asking
        for CUDA where there is none is a ``ValueError``."""
        self.net.to(check_device(device))
        return self

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
        """Raw network outputs for T samples in one pass: ``[T, N, ...]`` (T rounded up by
        :meth:`sample_count` for mixtures, so their parts weigh the same).

        ``max_rows`` bounds the rows of every forward (None: one forward over all ``T*N``
        rows; ``"auto"``: see :func:`resolve_max_rows`). Up to ``max_rows`` samples, the N
        inputs are split into chunks; more samples are split into ranges of ``max_rows`` groups
        as well. The result does not depend on it.
        """
        x, generator = self._sample_inputs(x, samples, generator, seed)
        samples = self.sample_count(check_samples(samples))
        max_rows = resolve_max_rows(max_rows, x)
        with kept_modes(self.net), torch.no_grad():
            self.net.eval()
            return self._draw_samples(x, samples, generator, max_rows)

    def _draw_samples(
        self, x: Tensor, samples: int, generator: torch.Generator | None, max_rows: int | None
    ) -> Tensor:
        """The one pass (chunked) behind :meth:`sample`, on checked inputs, in eval mode under
        ``no_grad``: ``[T, N, ...]``. Methods with their own pass (ensembles) override it."""
        ranges, per_chunk = chunk_plan(samples, len(x), max_rows)
        with self.sampling(samples, generator):
            return forward_in_chunks(self.net, x, ranges, per_chunk, self.net, group_dim=0)

    def sample_count(self, samples: int) -> int:
        """How many samples are drawn when T are asked for: T, or the next multiple of a
        mixture's parts where every part must weigh the same (an ensemble's M members, IBNN's K
        components): ``pred.num_samples`` says how many there are."""
        return samples

    def reference_samples(
        self, x: Tensor, samples: int, generator: torch.Generator | None = None
    ) -> Tensor:
        """The plain loop of T passes with the same draws as :meth:`sample`: ``[T, N, ...]``.

        One sampling block of the method (so it draws exactly what the one pass draws: dropout
        keys, noise, MCBN's bank rows), then pass t runs sample group t alone over all N rows
        (``select_groups(t, t + 1)``). The conformance suite checks the one pass against it.
        """
        x, _ = self._sample_inputs(x, samples, None, None)
        samples = self.sample_count(check_samples(samples))
        outs = []
        with kept_modes(self.net), torch.no_grad():
            self.net.eval()
            with self.sampling(samples, generator):
                for t in range(samples):
                    select_groups(self.net, t, t + 1)
                    outs.append(self.net(x))  # [N, ...]
        return torch.stack(outs)

    def _sample_inputs(
        self, x: Tensor, samples: int, generator: torch.Generator | None, seed: int | None
    ) -> tuple[Tensor, torch.Generator | None]:
        """Checked inputs and the generator to draw with (from ``seed`` if given)."""
        check_samples(samples)
        return self._check_inputs(x), _seeded_generator(generator, seed)

    def predict(
        self,
        x: Tensor | Data,
        samples: int = 50,
        *,
        generator: torch.Generator | None = None,
        seed: int | None = None,
        max_rows: MaxRows = DEFAULT_MAX_ROWS,
    ) -> Predictive:
        """The predictive distribution at ``x [N, ...]`` from T samples, in one vectorised pass.

        ``x``: a tensor or array, or a Dataset or DataLoader whose inputs are read in dataset
        order (targets ignored). ``samples``: a positive int.
        """
        out = self.sample(x, samples, generator=generator, seed=seed, max_rows=max_rows)
        return self.to_predictive(out)

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
        """``(X, y)`` of ``data`` on the network's device; ``y`` ``[N, 1]`` becomes ``[N]``."""
        x, y = data_tensors(data)
        classify = self.config.task is Task.CLASSIFICATION
        y = class_labels(y) if classify else regression_targets(y)
        return x.to(self.device), y.to(self.device)

    def _remember_input_shape(self, ds: Any) -> None:
        """Record the shape of one input row; check that a target is one number per row."""
        x0, y0 = ds[0][0], ds[0][1]
        self.input_shape = tuple(x0.shape)
        y0 = torch.as_tensor(y0)
        if y0.numel() != 1:
            kind = "class label" if self.config.task is Task.CLASSIFICATION else "target"
            raise ValueError(
                f"each row needs one {kind} (y of shape [N] or [N, 1]), got rows of "
                f"shape {list(y0.shape)}"
            )

    def _check_inputs(self, x: Tensor | Data) -> Tensor:
        """Inputs ``[N, ...]`` (a tensor or array, or a Dataset/DataLoader's inputs) on the
        network's device and dtype, checked for shape and finiteness."""
        x = torch.as_tensor(input_rows(x), device=self.device)
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

    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write a bundle folder: ``weights.safetensors`` + ``config.json`` (never pickle).

        An existing file or non-empty folder at ``path`` is refused unless ``overwrite=True``.
        The network is rebuilt on load from its factory spec (our model factories record it);
        a user's own network is passed again to :func:`bayesify.load` as ``net=``.
        """
        path = Path(path)
        if not overwrite and (path.is_file() or (path.is_dir() and any(path.iterdir()))):
            raise FileExistsError(
                f"{path} already exists and is not empty; pass overwrite=True to replace it"
            )
        spec = getattr(self.net, "bayesify_spec", None)
        config = {
            "method": self.name,
            "config": self.config.to_dict(),
            "model": spec,
            "noise_variance": self.noise_variance,
            "noise_fitted": self.noise_fitted,
            "constant_variance": self.constant_variance,
            "input_shape": list(self.input_shape) if self.input_shape is not None else None,
            "metadata": self.metadata,
            "extra": self.extra_state(),
        }
        return write_bundle(path, self.net.state_dict(), config)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config})"
