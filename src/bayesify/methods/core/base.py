"""The face every posterior approximation shares: ``fit``, ``predict``, ``save``/``load``.

A method wraps a network, owns its training objective, and predicts with T Monte Carlo samples in
one vectorised pass over ``T*N`` rows. It returns a :class:`~bayesify.predictive.Predictive`.

Memory is bounded by ``max_rows`` rows per forward and ``max_bytes`` per call; the folding and
chunking are :mod:`bayesify.nn.folding`'s. Around the class: :mod:`~bayesify.methods.core.config`
(the options every method has), :mod:`~bayesify.methods.core.inputs` (what inputs, targets, sample
counts and devices are accepted), :mod:`~bayesify.methods.core.pretrained` (``from_pretrained``),
:mod:`~bayesify.methods.core.training` (``fit``, ``fit_noise``) and
:mod:`~bayesify.methods.core.bundle` (``save``).
"""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.data.preprocessing import Preprocessing
from bayesify.methods.core.adaptive import predict_adaptive
from bayesify.methods.core.bundle import Bundled
from bayesify.methods.core.config import MethodConfig as MethodConfig  # re-exported
from bayesify.methods.core.inputs import (
    as_input_tensor,
    check_dataset_row,
    check_device,
    check_first_layer,
    check_inputs,
    check_row_target,
    check_samples,
    class_labels,
    data_tensors,
    regression_targets,
    seeded_generator,
)
from bayesify.methods.core.likelihood import gaussian_nll, regression_means, split_heteroscedastic
from bayesify.methods.core.presets import apply_preset
from bayesify.methods.core.pretrained import FromPretrained
from bayesify.methods.core.spread import check_spread
from bayesify.methods.core.training import Trainable
from bayesify.models.architecture import architecture_spec, net_class_name
from bayesify.nn import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    MaxRows,
    check_sample_bytes,
    chunk_plan,
    forward_in_chunks,
    group_bytes,
    resolve_max_rows,
    sampling,
    select_groups,
)
from bayesify.nn.folding import deterministic_prefix
from bayesify.nn.modes import eval_mode
from bayesify.nn.net_facts import NetFacts
from bayesify.options import Task, shown
from bayesify.predictive import Predictive
from bayesify.train import (
    Data,
    History,
    Strategy,
    as_dataset,
)

log = logging.getLogger(__name__)


class Method(FromPretrained, Trainable, Bundled):
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

    def _check_strategy(self, strategy: Strategy, replica_batch_size: int) -> None:
        """Refuse a training strategy the method cannot train with (before any work)."""

    @contextmanager
    def sampling(self, samples: int, generator: torch.Generator | None) -> Iterator[None]:
        """Turn the network's randomness on for ``samples`` groups; methods may draw first."""
        with sampling(self.net, samples, generator, layers=self._net_facts().stochastic):
            yield

    # ------------------------------------------------------------------ network facts
    def _facts_cache(self) -> NetFacts:
        cache = self.__dict__.get("_net_facts_cache")
        if cache is None:  # also for methods built before the cache existed (unpickled)
            cache = self.__dict__["_net_facts_cache"] = NetFacts()
        return cache

    def _net_facts(self):  # noqa: ANN202 - nn.net_facts.Facts
        """The network's modules, stochastic layers and deterministic prefix, found again
        only when its modules changed (:class:`~bayesify.nn.net_facts.NetFacts`)."""
        return self._facts_cache().of(self.net)

    def _walked_facts_cache(self) -> NetFacts:
        """The cache after a walk of the network as it is now (device and dtype current)."""
        cache = self._facts_cache()
        cache.of(self.net)
        return cache

    # ------------------------------------------------------------------ prediction
    def to(self, device: str | torch.device) -> Method:
        """Move the network (and so every prediction) to ``device``; returns ``self``. Asking
        for CUDA where there is none is a ``ValueError``."""
        self.net.to(check_device(device))
        return self

    @property
    def device(self) -> torch.device:
        return self._walked_facts_cache().device

    def sample(
        self,
        x: Tensor,
        samples: int = 50,
        *,
        generator: torch.Generator | None = None,
        seed: int | None = None,
        max_rows: MaxRows = DEFAULT_MAX_ROWS,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
    ) -> Tensor:
        """Raw network outputs for T samples in one pass: ``[T, N, ...]`` (T rounded up by
        :meth:`sample_count` for mixtures, so their parts weigh the same).

        ``max_rows`` bounds the rows of every forward (None: one forward over all ``T*N``
        rows; ``"auto"``: see :func:`resolve_max_rows`). Up to ``max_rows`` samples, the N
        inputs are split into chunks; more samples are split into ranges of ``max_rows`` groups
        as well. The result does not depend on it. ``max_bytes`` (default 1 GiB, None: no
        limit) bounds what the call holds, the ``[T, N, ...]`` samples and the per-group draws:
        a call that would need more is refused with the figure before it allocates it.
        """
        samples = check_samples(samples)
        cache = self._facts_cache()
        facts = cache.of(self.net)  # the call's one walk of the modules (see NetFacts.last)
        if type(self)._check_inputs is Method._check_inputs:  # what it does, without a walk
            x = check_inputs(x, cache.device, cache.dtype, self.input_shape)
        else:
            x = self._check_inputs(x)
        generator = seeded_generator(generator, seed)
        samples = self.sample_count(samples)
        max_rows = resolve_max_rows(max_rows, x, self.net, facts=facts)
        # at least one output number per sample and row: refused before any draw is made
        per_group = group_bytes(self.net, facts.stochastic)
        check_sample_bytes(samples, len(x), 1, x.element_size(), per_group, max_bytes)
        with eval_mode(self.net, facts.modules), torch.no_grad():
            return self._draw_samples(x, samples, generator, max_rows, max_bytes=max_bytes)

    def _draw_samples(
        self,
        x: Tensor,
        samples: int,
        generator: torch.Generator | None,
        max_rows: int | None,
        start: int = 0,
        max_bytes: int | None = None,
    ) -> Tensor:
        """The one pass (chunked) behind :meth:`sample`, on checked inputs, in eval mode under
        ``no_grad``: ``[T, N, ...]``, refused beyond ``max_bytes``. ``start`` > 0: ``x`` is the
        output of the net's first ``start`` layers (see :meth:`_prefix_sampler`). Methods with
        their own pass (ensembles) override it."""
        ranges, per_chunk = chunk_plan(samples, len(x), max_rows)
        with self.sampling(samples, generator):
            return forward_in_chunks(self.net, x, ranges, per_chunk, self.net, 0, start=start,
                                     max_bytes=max_bytes, facts=self._net_facts())  # fmt: skip

    def _prefix_sampler(
        self, x: Tensor, generator: torch.Generator | None, max_rows: MaxRows
    ) -> Callable[[Tensor, int], Tensor] | None:
        """For repeated sampling of rows of ``x`` (adaptive sampling's rounds): the net's
        deterministic prefix run once over ``x``, and ``draw(rows, T) -> [T, len(rows), ...]``
        drawing exactly what ``self.sample(x[rows], T, generator=generator)`` draws. None where
        the method samples its own way or the net has no such prefix."""
        base = Method
        if (type(self)._draw_samples is not base._draw_samples
                or type(self).sample_count is not base.sample_count):  # fmt: skip
            return None
        k = deterministic_prefix(self.net)
        if k == 0:
            return None
        x, _ = self._sample_inputs(x, 1, None, None)
        with eval_mode(self.net), torch.no_grad():
            h = self.net[:k](x)
        rows_budget = resolve_max_rows(max_rows, x, self.net)

        def draw(rows: Tensor, samples: int) -> Tensor:
            with eval_mode(self.net), torch.no_grad():
                return self._draw_samples(h[rows], samples, generator, rows_budget, start=k)

        return draw

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
        with eval_mode(self.net), torch.no_grad(), self.sampling(samples, generator):
            for t in range(samples):
                select_groups(self.net, t, t + 1)
                outs.append(self.net(x))  # [N, ...]
        return torch.stack(outs)

    def _sample_inputs(
        self, x: Tensor, samples: int, generator: torch.Generator | None, seed: int | None
    ) -> tuple[Tensor, torch.Generator | None]:
        """Checked inputs and the generator to draw with (from ``seed`` if given)."""
        check_samples(samples)
        return self._check_inputs(x), seeded_generator(generator, seed)

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
                stacklevel=3,
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

    def _dtype(self) -> torch.dtype:
        """The network's floating-point dtype (its parameters')."""
        return self._walked_facts_cache().dtype

    def _check_inputs(self, x: Tensor | Data) -> Tensor:
        """Checked inputs on the network's device and dtype (see :func:`inputs.check_inputs`)."""
        cache = self._walked_facts_cache()
        return check_inputs(x, cache.device, cache.dtype, self.input_shape)

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
