"""The face every posterior approximation shares: ``fit``, ``predict``, ``save``/``load``.

A method wraps a network, owns its training objective, and predicts with T Monte Carlo samples in
one vectorised pass over ``T*N`` rows. It returns a :class:`~bayesify.predictive.Predictive`.

Memory is bounded by ``max_rows`` rows per forward and ``max_bytes`` per call; the folding and
chunking are :mod:`bayesify.nn.folding`'s. Around the class: :mod:`~bayesify.methods.core.config`
(the options every method has), :mod:`~bayesify.methods.core.inputs` (what inputs, targets, sample
counts and devices are accepted), :mod:`~bayesify.methods.core.pretrained` (``from_pretrained``),
:mod:`~bayesify.methods.core.training` (``fit``, ``fit_noise``),
:mod:`~bayesify.methods.core.sampling` (``sample``, ``reference_samples``, ``to``) and
:mod:`~bayesify.methods.core.bundle` (``save``).
"""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.callsite import user_stacklevel
from bayesify.data.preprocessing import Preprocessing
from bayesify.methods.core.adaptive import predict_adaptive
from bayesify.methods.core.bundle import Bundled
from bayesify.methods.core.config import MethodConfig as MethodConfig  # re-exported
from bayesify.methods.core.inputs import (
    as_input_tensor,
    check_dataset_row,
    check_first_layer,
    check_inputs,
    check_row_target,
    class_labels,
    data_tensors,
    regression_targets,
)
from bayesify.methods.core.likelihood import gaussian_nll, regression_means, split_heteroscedastic
from bayesify.methods.core.presets import apply_preset
from bayesify.methods.core.pretrained import FromPretrained
from bayesify.methods.core.sampling import Sampling
from bayesify.methods.core.spread import check_spread
from bayesify.methods.core.training import Trainable
from bayesify.models.architecture import architecture_spec, net_class_name
from bayesify.nn import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    MaxRows,
)
from bayesify.options import Task, shown
from bayesify.predictive import Predictive
from bayesify.train import (
    Data,
    History,
    Strategy,
    as_dataset,
)

log = logging.getLogger(__name__)


class Method(FromPretrained, Trainable, Bundled, Sampling):
    """Base class: a network plus the randomness used to sample its predictive distribution.

    The method works on a deep copy of ``net`` (``method.net``): wrapping, fitting and
    predicting never change the network, the tensors or the train/eval mode the caller handed
    in. ``inplace=True`` wraps ``net`` itself instead (no copy, for networks too large to copy):
    its layers are then swapped in place and fitting trains it.
    """

    name: ClassVar[str] = "method"
    Config: ClassVar[type[MethodConfig]] = MethodConfig
    #: what to change when the weight-driven spread is negligible (None: never warned about;
    #: :mod:`.spread`)
    spread_hint: ClassVar[str | None] = None

    def __init__(
        self,
        net: nn.Module,
        config: MethodConfig | None = None,
        *,
        inplace: bool = False,
        preset: str | None = None,
        **options: Any,
    ):
        if not isinstance(net, nn.Module):
            raise TypeError(
                f"{type(self).__name__} wraps a torch.nn.Module, got {type(net).__name__}"
            )
        if not isinstance(inplace, bool):
            raise TypeError(f"inplace must be True or False, got {inplace!r}")
        # a paper preset (methods/core/presets.py): its config under the given options, its fit
        # keyword arguments as fit()'s defaults
        options, self.recipe = apply_preset(self.name, preset, options)
        self.preset = preset
        if config is None:
            config = self.Config.from_dict(options)
        elif options:
            config = replace(config, **options)
        if not isinstance(config, self.Config):
            raise TypeError(f"{type(self).__name__} takes a {self.Config.__name__}")
        if not inplace:  # after the options are checked: a bad one costs no copy
            net = copy.deepcopy(net)
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
        """Mean data term: squared error (regression), the Gaussian NLL with the predicted
        variance (heteroscedastic regression) or cross-entropy (classification)."""
        if self.config.task is Task.CLASSIFICATION:
            return F.cross_entropy(out, class_labels(y, out.shape[-1]))
        if self.config.heteroscedastic:
            return gaussian_nll(*split_heteroscedastic(out), y)
        if out.numel() != y.numel():
            raise ValueError(
                f"a regression net must output [N] or [N, 1], got {list(out.shape)} for "
                f"{y.numel()} targets; for class scores pass task='classification'"
            )
        return F.mse_loss(out.reshape(y.shape), y)

    def param_groups(self, lr: float, weight_decay: float) -> list[dict[str, Any]]:
        """Optimiser parameter groups; methods override to give variational parameters their own."""
        return [
            {
                "params": [p for p in self.net.parameters() if p.requires_grad],
                "weight_decay": weight_decay,
            }
        ]

    def _own_and_rest(
        self, own: Iterable[Tensor], weight_decay: float, **own_options: Any
    ) -> list[dict[str, Any]]:
        """Two optimiser groups for :meth:`param_groups`: the trainable parameters in ``own``
        without weight decay (with ``own_options``, e.g. their own ``lr``) and every other
        trainable parameter of the net with ``weight_decay``; an empty group is left out."""
        ids = {id(p) for p in own}
        params = [p for p in self.net.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if id(p) in ids], "weight_decay": 0.0, **own_options},
            {"params": [p for p in params if id(p) not in ids], "weight_decay": weight_decay},
        ]
        return [g for g in groups if g["params"]]

    def after_step(self) -> None:
        """Runs after every optimiser step (projections, clamps)."""

    def _after_fit(self, train: Data, batch_size: int, seed: int) -> None:
        """Runs once after training on the training data (e.g. fill a statistics bank)."""

    def _check_strategy(self, strategy: Strategy, replica_batch_size: int) -> None:
        """Refuse a training strategy the method cannot train with (before any work)."""

    def predict(
        self,
        x: Tensor | Data,
        samples: int | Literal["adaptive"] = 50,
        *,
        generator: torch.Generator | None = None,
        seed: int | None = None,
        max_rows: MaxRows = DEFAULT_MAX_ROWS,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
        **adaptive: Any,
    ) -> Predictive:
        """The predictive distribution at ``x [N, ...]`` from T samples, in one vectorised pass.

        ``x``: a tensor or array, or a Dataset or DataLoader whose inputs are read in dataset
        order (targets ignored). ``samples``: a positive int.
        With ``preprocessing`` set (bundles trained from a table), ``x`` is in the user's raw
        units and the regression predictive comes back in the user's target units.
        ``samples="adaptive"`` (with ``tol``, ``start``, ``max_samples``): more samples only
        for rows whose Monte Carlo standard error is above ``tol`` (:mod:`.adaptive`).
        ``max_bytes``: the most the call's samples may hold (see :meth:`sample`).
        """
        prep = self.preprocessing
        if prep is not None:
            x = prep.inputs(x)
        if samples == "adaptive" or adaptive:
            back = prep.outputs if prep is not None else None
            return predict_adaptive(self, x, samples, generator=generator, seed=seed,
                                    max_rows=max_rows, outputs=back, **adaptive)  # fmt: skip
        out = self.sample(
            x, samples, generator=generator, seed=seed, max_rows=max_rows, max_bytes=max_bytes
        )
        pred = self.to_predictive(out)
        check_spread(pred, type(self).__name__, self.spread_hint)
        return pred if prep is None else prep.outputs(pred)

    def to_predictive(self, out: Tensor) -> Predictive:
        """Raw outputs ``[T, N, ...]`` -> Predictive (softmax for classification)."""
        if self.config.task is Task.CLASSIFICATION:
            return Predictive.from_logits(out)
        if self.config.heteroscedastic:  # each sample's own variance: [T, N]
            return Predictive.regression(*split_heteroscedastic(out))
        if not self.noise_fitted:
            warnings.warn(
                f"{type(self).__name__}: the noise variance τ⁻¹ was never fitted, so the "
                "predictive adds 1.0 (training target units) to every sample; pass val= to "
                "fit()/from_pretrained() or call fit_noise(val)",
                UserWarning,
                stacklevel=user_stacklevel(),
            )
        return Predictive.regression(regression_means(out), self.noise_variance)

    # ------------------------------------------------------------------ input checks
    def _tensors(self, data: Data) -> tuple[Tensor, Tensor]:
        """``(X, y)`` of ``data`` on the network's device, ``X`` checked as :meth:`predict`
        checks inputs; ``y`` ``[N, 1]`` becomes ``[N]``."""
        x, y = data_tensors(data)
        x = check_inputs(x, None, self._dtype(), self.input_shape, "validation inputs")
        classify = self.config.task is Task.CLASSIFICATION
        y = class_labels(y) if classify else regression_targets(y)
        return x.to(self.device), y.to(self.device)

    def _remember_input_shape(self, ds: Any) -> None:
        """Record the shape of one input row; check that a target is one number per row."""
        self.input_shape = tuple(ds[0][0].shape)
        check_row_target(ds[0][1], self.config.task is Task.CLASSIFICATION)

    def _checked_data(self, data: Data, what: str) -> Data:
        """Training or validation data whose inputs are checked as :meth:`predict` checks
        them: ``(X, y)`` with ``X`` cast to the network's dtype (real numbers, the recorded
        row shape, finite), a Dataset or DataLoader by its first row (real, floating point);
        then their width against the network's first layer (:func:`inputs.check_first_layer`),
        so a mismatch is one line instead of a torch error inside training."""
        if isinstance(data, tuple | list) and len(data) == 2:
            x = check_inputs(data[0], None, self._dtype(), self.input_shape, what)
            y = as_input_tensor(data[1], what.replace("inputs", "targets"))
            data, first = (x, y), x[:1]
        else:
            ds = as_dataset(data)
            if len(ds) == 0:  # type: ignore[arg-type]
                raise ValueError(f"{what}: the dataset is empty")
            first = check_dataset_row(ds[0][0], what).unsqueeze(0)
            check_inputs(first, None, self._dtype(), self.input_shape, what)
        check_first_layer(self.net, tuple(first.shape[1:]), what)
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config})"


def member_class(method: Any, wrapper: str) -> type[Method]:
    """``method`` when it is a :class:`Method` class, the member a wrapper method (``wrapper``:
    its name, e.g. ``"DeepEnsemble"``, ``"TTA"``) runs; anything else, a registry name
    included, is a one-line ``ValueError`` saying what to pass."""
    if not (isinstance(method, type) and issubclass(method, Method)):
        hint = f" (bayesify.get_method({method!r}) gives it)" if isinstance(method, str) else ""
        raise ValueError(
            f"{wrapper} takes the member method's class, e.g. method=bayesify.MCDropout, "
            f"got {shown(method)}{hint}"
        )
    return method
