"""Deep ensembles (Lakshminarayanan et al. 2017) that wrap any method, predicted in one pass.

``DeepEnsemble(net, members=M, method=MCDropout, method_options={...})`` makes M copies of
``net``, re-initialises member m with seed ``init_seed + m`` and wraps each in the member method
(default: the plain network, :class:`Deterministic`). ``DeepEnsemble([net1, net2, ...])`` (or
``DeepEnsemble.from_pretrained([...])``) uses the given networks as the members instead.
``fit`` trains the members one after the other with the shared training loop and seeds
``seed + m``.

Prediction with T samples: every member gives K = ceil(T / M) samples; plain-network members
(the default, :class:`Deterministic`) give one each whatever T is asked for, T = M, since their
mixture is exact with M (as BatchEnsemble's and Packed-Ensembles'). Members without any
stochastic layer are forwarded once; all members run together
in one pass by stacking their parameters and buffers (``torch.func.stack_module_state``) and
calling member 0's module with each member's state (``functional_call`` under ``vmap``). The
per-group randomness (dropout keys, flipout ε) is drawn once by member 0's ``sampling`` and
shared by all members; their weights differ. Where vmap cannot run the members (a vmap error,
logged once), or for member methods whose draws depend on the member's own buffers (MCBN's
banks: not in ``VMAP_SAFE``), the members run one after the other instead, each in its own
sampling block started from the same generator state (so the draws are the same).

Samples are ordered k-major (sample ``k*M + m`` is member m's k-th). Every member weighs the
same: when M does not divide T, T is rounded up to the next multiple of M
(:meth:`~bayesify.methods.core.base.Method.sample_count`; sampling members, M = 3, T = 4 gives
6 samples, 2 per member), so the predictive mean is the average of the members' means whatever
T is.

Regression: τ⁻¹ is the mean of the members' noise variances, refitted on validation data when
given (members are homoscedastic; this is not Lakshminarayanan's heteroscedastic NLL net).
Bundles hold all members' weights in one safetensors file under ``members.<m>.`` keys.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.func import stack_module_state

from bayesify.methods.core.base import Method, MethodConfig, member_class
from bayesify.methods.core.deterministic import Deterministic
from bayesify.methods.core.inputs import given_members
from bayesify.methods.core.presets import with_recipe
from bayesify.nn import (
    check_sample_bytes,
    chunk_plan,
    forward_in_chunks,
    group_bytes,
    stochastic_modules,
)
from bayesify.nn.stacked import stacked_call
from bayesify.train import Data, as_dataset

log = logging.getLogger(__name__)

#: Member methods whose per-group draws do not depend on the member's weights or buffers, so
#: one draw (member 0's) can serve all members under vmap. Others (e.g. MCBN, whose drawn
#: statistics come from each member's own bank) run as a loop over members, each member in
#: its own sampling block.
VMAP_SAFE = frozenset({"deterministic", "mc-dropout", "bbb"})


@dataclass(frozen=True)
class EnsembleConfig(MethodConfig):
    """``members``: M; ``method``: the member method's class (e.g. ``bayesify.MCDropout``;
    bundles store its name); ``method_options``: its options (JSON-able); ``init_seed``:
    member m's init seed offset."""

    members: int = 5
    method: type[Method] = field(default=Deterministic, metadata={"method_class": True})
    method_options: dict[str, Any] = field(default_factory=dict)
    init_seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        _member_class(self.method)
        if self.members < 1:
            raise ValueError(f"an ensemble needs members >= 1, got {self.members}")

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "method": self.method.name}


def _member_class(method: Any) -> type[Method]:
    """The member method class; a name or an ensemble is a clear error."""
    member = member_class(method, "DeepEnsemble")
    if issubclass(member, DeepEnsemble):
        raise ValueError("an ensemble of ensembles is not supported")
    return member


class EnsembleNet(nn.Module):
    """The members' networks as one module: ``[N, ...]`` -> stacked outputs ``[M, N, ...]``."""

    def __init__(self, members: list[nn.Module]) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)

    def forward(self, x: Tensor) -> Tensor:
        return torch.stack([m(x) for m in self.members])


def _reinitialise(net: nn.Module, seed: int) -> None:
    """Fresh weights for ``net`` from torch's initialisers, seeded, global RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for module in net.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()


def _clone_generator(generator: torch.Generator | None) -> torch.Generator | None:
    if generator is None:
        return None
    clone = torch.Generator(device=generator.device)
    clone.set_state(generator.get_state())
    return clone


class DeepEnsemble(Method):
    """M independently initialised and trained members of any method, as one method."""

    name = "ensemble"
    Config = EnsembleConfig
    config: EnsembleConfig

    def __init__(
        self,
        net: nn.Module | list[nn.Module] | tuple[nn.Module, ...],
        config: EnsembleConfig | None = None,
        *,
        inplace: bool = False,
        **options: Any,
    ) -> None:
        """``net``: one network (M re-initialised copies become the members) or a list of M
        networks used as they are (e.g. already trained; copied unless ``inplace=True``)."""
        self._copy_given = not inplace
        self._trained_members = isinstance(net, list | tuple)
        self._given = given_members(net, config, options, "deep ensemble")
        if self._given is not None:
            net, inplace = self._given[0], True  # the template is not copied: the members are
        # one network now (a list or tuple gave the members); Method's constructor checks its type
        super().__init__(cast(nn.Module, net), config, inplace=inplace, **options)

    def _prepare(self, net: nn.Module) -> None:
        cfg = self.config
        member_cls = _member_class(cfg.method)
        if self._given is not None:  # networks given: copies (as the base copies) or themselves
            nets = [copy.deepcopy(n) for n in self._given] if self._copy_given else self._given
        else:
            nets = [copy.deepcopy(net) for _ in range(cfg.members)]
            for m, member_net in enumerate(nets):
                _reinitialise(member_net, cfg.init_seed + m)
        self.member_methods: list[Method] = []
        for member_net in nets:
            options: dict[str, Any] = {"task": cfg.task, "noise_objective": cfg.noise_objective,
                                       "likelihood": cfg.likelihood}  # fmt: skip
            options.update(cfg.method_options)
            self.member_methods.append(member_cls(member_net, inplace=True, **options))
        self._given = None  # the members hold them now
        self.net = EnsembleNet([mm.net for mm in self.member_methods])
        self.net.bayesify_spec = getattr(net, "bayesify_spec", None)
        self._vmap_ok: bool | None = None

    def _from_pretrained(
        self,
        train: Data | None,
        val: Data | None,
        *,
        batch_size: int | None,
        seed: int,
        progress: bool,
        **member_options: Any,
    ) -> None:
        """Each member's own ``from_pretrained`` step (member m with ``seed + m``; e.g. MCBN
        members fill their banks from ``train``), then τ of the ensemble on ``val``.
        ``member_options``: the member method's ``from_pretrained`` options."""
        if not self._trained_members:
            raise ValueError(
                "DeepEnsemble.from_pretrained takes a list of trained networks [net1, net2, ...]"
                "; one network would be copied and re-initialised (use DeepEnsemble(net) and fit)"
            )
        for m, member in enumerate(self.member_methods):
            member.input_shape = self.input_shape
            member._from_pretrained(
                train, None, batch_size=batch_size, seed=seed + m, progress=progress,
                **member_options,
            )  # fmt: skip
        self._average_member_noise()
        self._fit_noise_on(val, seed)

    def _average_member_noise(self) -> None:
        noise = [mm.noise_variance for mm in self.member_methods]
        if any(mm.noise_fitted for mm in self.member_methods):
            self.noise_variance = sum(noise) / len(noise)

    @classmethod
    def from_factory(cls, factory: Callable[[], nn.Module], **options: Any) -> DeepEnsemble:
        """An ensemble of networks built by ``factory()`` (members are re-initialised copies)."""
        return cls(factory(), **options)

    @property
    def members(self) -> int:
        return self.config.members

    # ------------------------------------------------------------------ training
    @with_recipe
    def fit(
        self, train: Data, val: Data | None = None, *, seed: int = 0, **kwargs: Any
    ) -> DeepEnsemble:
        """Train member m with ``seed + m`` (same options as :meth:`Method.fit`); for regression
        with ``val``, fit τ of the ensemble's predictive afterwards."""
        train = self._checked_data(train, "training inputs")
        if val is not None:
            val = self._checked_data(val, "validation inputs")
        for m, member in enumerate(self.member_methods):
            log.info("ensemble member %d/%d", m + 1, self.members)
            member.fit(train, val, seed=seed + m, **kwargs)
        self.member_histories = [mm.history for mm in self.member_methods]
        self._remember_input_shape(as_dataset(train))
        self._average_member_noise()
        if val is not None and self.config.task.value == "regression":
            self.fit_noise(val, seed=seed)
        return self

    # ------------------------------------------------------------------ prediction
    def _stacked_forward(self, x: Tensor) -> Tensor:
        """All members on the same rows ``x [R, ...]`` -> ``[M, R, ...]`` (vmap, else a loop)."""
        nets = list(self.net.members)
        params, buffers = stack_module_state(nets)
        try:
            out = stacked_call(nets[0], params, buffers, x)
        except Exception as e:  # noqa: BLE001 - any vmap failure falls back to the loop
            log.warning("vmap cannot run the members (%s); looping over members", e)
            self._vmap_ok = False
            raise _RetryChunk from e
        self._vmap_ok = True
        return out

    def sample_count(self, samples: int) -> int:
        """M for plain-network members (each gives one answer: their mixture is exact with M,
        and repeats would add nothing); else T rounded up to a multiple of M, every member
        giving ceil(T/M) samples."""
        if self.distinct_samples() is not None:
            return self.members
        return self.members * math.ceil(samples / self.members)

    def distinct_samples(self) -> int | None:
        """M for members that are plain networks (each gives one answer); None for members
        that sample."""
        return self.members if self.config.method is Deterministic else None

    def _draw_samples(
        self,
        x: Tensor,
        samples: int,
        generator: torch.Generator | None,
        max_rows: int | None,
        start: int = 0,
        max_bytes: int | None = None,
    ) -> Tensor:
        """Raw outputs ``[T, N, ...]``: K = T/M samples per member in one pass; refused beyond
        ``max_bytes`` (the members' outputs are joined in a copy: twice the samples')."""
        if start:  # an ensemble has no prefix sampler: its pass starts at the inputs
            raise ValueError(f"DeepEnsemble samples from the inputs (start=0), got start={start}")
        state = _clone_generator(generator)
        try:
            return self._sample(x, samples, generator, max_rows, max_bytes)
        except _RetryChunk:  # vmap failed: redo everything with the member loop
            return self._sample(x, samples, state, max_rows, max_bytes)

    def _sample(
        self,
        x: Tensor,
        samples: int,
        generator: torch.Generator | None,
        max_rows: int | None,
        max_bytes: int | None,
    ) -> Tensor:
        k = math.ceil(samples / self.members)
        if not stochastic_modules(self.net):
            # members without randomness give K equal samples: forward each once and repeat
            per_chunk = len(x) if not max_rows else max(1, max_rows)
            # M small forwards: cheaper than stacking states for vmap
            out = torch.cat([self.net(c) for c in torch.split(x, per_chunk)], 1).unsqueeze(1)
            row = math.prod(out.shape[3:])
            check_sample_bytes(samples, len(x), row, out.element_size(), 0, max_bytes)
            return self._interleave(out.expand(-1, k, *out.shape[2:]), samples)  # [M,1,N,...]
        if self.config.method.name not in VMAP_SAFE or self._vmap_ok is False:
            ranges, per_chunk = chunk_plan(k, len(x), max_rows, 1)
            outs = self._member_loop(x, k, generator, ranges, per_chunk, max_bytes)
            return self._interleave(outs, samples)
        ranges, per_chunk = chunk_plan(k, len(x), max_rows, self.members)  # vmap: M rows per row
        with self.member_methods[0].sampling(k, generator):
            out = forward_in_chunks(self.member_methods[0].net, x, ranges, per_chunk,
                               self._stacked_forward, group_dim=1, max_bytes=max_bytes)  # fmt: skip
        return self._interleave(out, samples)  # [T, N, ...]

    def _member_loop(
        self,
        x: Tensor,
        k: int,
        generator: torch.Generator | None,
        ranges: list[tuple[int, int]],
        per_chunk: int,
        max_bytes: int | None = None,
    ) -> Tensor:
        """Members one after the other, each in its own sampling block started from the same
        generator state: ``[M, K, N, ...]``, written into one tensor allocated after the first
        member's pass (refused first if all M would exceed ``max_bytes``)."""
        out: Tensor | None = None
        for m, member in enumerate(self.member_methods):
            with member.sampling(k, _clone_generator(generator)):
                y = forward_in_chunks(member.net, x, ranges, per_chunk, member.net, 0)
            if out is None:
                row = math.prod(y.shape[2:])
                per_group = group_bytes(member.net)
                check_sample_bytes(k * self.members, len(x), row, y.element_size(), per_group,
                                   max_bytes)  # fmt: skip
                out = y.new_empty((self.members, *y.shape))
            out[m] = y
            del y
        assert out is not None
        return out

    def _interleave(self, out: Tensor, samples: int) -> Tensor:
        """``[M, K, N, ...]`` -> ``[T, N, ...]`` in k-major order (T = K·M)."""
        m, k = out.shape[:2]
        return out.transpose(0, 1).reshape(k * m, *out.shape[2:])[:samples]

    def reference_samples(
        self, x: Tensor, samples: int, generator: torch.Generator | None = None
    ) -> Tensor:
        """Each member's own reference loop of K passes, every member starting from the same
        generator state (the draws member 0 makes in the one pass): ``[T, N, ...]``."""
        x = self._check_inputs(x)
        samples = self.sample_count(samples)
        k = samples // self.members
        outs = [
            mm.reference_samples(x, k, generator=_clone_generator(generator))
            for mm in self.member_methods
        ]
        return self._interleave(torch.stack(outs), samples)

    # ------------------------------------------------------------------ bundles
    def extra_state(self) -> dict[str, Any]:
        return {
            "members": [
                {
                    "noise_variance": mm.noise_variance,
                    "constant_variance": mm.constant_variance,
                    "input_shape": list(mm.input_shape) if mm.input_shape else None,
                    "extra": mm.extra_state(),
                }
                for mm in self.member_methods
            ]
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        for mm, s in zip(self.member_methods, state.get("members", []), strict=False):
            mm.noise_variance = float(s["noise_variance"])
            mm.constant_variance = s.get("constant_variance")
            mm.input_shape = tuple(s["input_shape"]) if s.get("input_shape") else None
            mm.load_extra_state(s.get("extra", {}))


class _RetryChunk(Exception):
    """vmap failed: the pass is redone with the member loop."""
