"""Deep ensembles (Lakshminarayanan et al. 2017) that wrap any method, predicted in one pass.

``DeepEnsemble(net, members=M, method="mc-dropout", method_options={...})`` makes M copies of
``net``, re-initialises member m with seed ``init_seed + m`` and wraps each in the member method
(default: the plain network, ``"deterministic"``). ``fit`` trains the members one after the
other with the shared training loop and seeds ``seed + m``.

Prediction with T samples: every member gives K = ceil(T / M) samples (members without any
stochastic layer, e.g. plain networks, are forwarded once and their output repeated K times,
since their K samples are equal); all members run together
in one pass by stacking their parameters and buffers (``torch.func.stack_module_state``) and
calling member 0's module with each member's state (``functional_call`` under ``vmap``). The
per-group randomness (dropout keys, flipout ε) is drawn once by member 0's ``sampling`` and
shared by all members; their weights differ. Where vmap cannot run the members (a vmap error,
logged once), or for member methods whose draws depend on the member's own buffers (MCBN's
banks: not in ``VMAP_SAFE``), the members run one after the other instead, each in its own
sampling block started from the same generator state (so the draws are the same).

Samples are ordered k-major (sample ``k*M + m`` is member m's k-th); when M does not divide T
the first T are kept, so members ``0 .. (T mod M) − 1`` contribute one sample more.

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
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from bayesify.methods.base import (
    DEFAULT_MAX_ROWS,
    MaxRows,
    Method,
    MethodConfig,
    chunk_plan,
    forward_in_chunks,
    resolve_max_rows,
)
from bayesify.methods.presets import with_recipe
from bayesify.nn import stochastic_modules
from bayesify.train import Data, as_dataset

log = logging.getLogger(__name__)

#: Member methods whose per-group draws do not depend on the member's weights or buffers, so
#: one draw (member 0's) can serve all members under vmap. Others (e.g. MCBN, whose drawn
#: statistics come from each member's own bank) run as a loop over members, each member in
#: its own sampling block.
VMAP_SAFE = frozenset({"deterministic", "mc-dropout", "bbb"})


@dataclass(frozen=True)
class EnsembleConfig(MethodConfig):
    """``members``: M; ``method``: the member method's registry name (or class);
    ``method_options``: its options (JSON-able); ``init_seed``: member m's init seed offset."""

    members: int = 5
    method: str = "deterministic"
    method_options: dict[str, Any] = field(default_factory=dict)
    init_seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.method, type):
            object.__setattr__(self, "method", self.method.name)
        if self.members < 1:
            raise ValueError(f"an ensemble needs members >= 1, got {self.members}")
        if self.method == "ensemble":
            raise ValueError("an ensemble of ensembles is not supported")


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

    def _prepare(self, net: nn.Module) -> None:
        from bayesify.methods.registry import get_method  # registry imports this module

        cfg = self.config
        member_cls = get_method(cfg.method)
        self.member_methods: list[Method] = []
        for m in range(cfg.members):
            member_net = copy.deepcopy(net)
            _reinitialise(member_net, cfg.init_seed + m)
            options = {"task": cfg.task, "noise_objective": cfg.noise_objective}
            options.update(cfg.method_options)
            self.member_methods.append(member_cls(member_net, **options))
        self.net = EnsembleNet([mm.net for mm in self.member_methods])
        self.net.bayesify_spec = getattr(net, "bayesify_spec", None)
        self._vmap_ok: bool | None = None

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
        for m, member in enumerate(self.member_methods):
            log.info("ensemble member %d/%d", m + 1, self.members)
            member.fit(train, val, seed=seed + m, **kwargs)
        self.member_histories = [mm.history for mm in self.member_methods]
        self._remember_input_shape(as_dataset(train))
        noise = [mm.noise_variance for mm in self.member_methods]
        self.noise_variance = sum(noise) / len(noise)
        if val is not None and self.config.task.value == "regression":
            self.fit_noise(val, seed=seed)
        return self

    # ------------------------------------------------------------------ prediction
    def _stacked_forward(self, x: Tensor) -> Tensor:
        """All members on the same rows ``x [R, ...]`` -> ``[M, R, ...]`` (vmap, else a loop)."""
        nets = list(self.net.members)
        params, buffers = stack_module_state(nets)
        base = nets[0]

        def run(p: dict[str, Tensor], b: dict[str, Tensor], xs: Tensor) -> Tensor:
            return functional_call(base, (p, b), (xs,))

        try:
            out = vmap(run, in_dims=(0, 0, None))(params, buffers, x)
        except Exception as e:  # noqa: BLE001 - any vmap failure falls back to the loop
            log.warning("vmap cannot run the members (%s); looping over members", e)
            self._vmap_ok = False
            raise _RetryChunk from e
        self._vmap_ok = True
        return out

    def sample(
        self,
        x: Tensor,
        samples: int = 50,
        *,
        generator: torch.Generator | None = None,
        seed: int | None = None,
        max_rows: MaxRows = DEFAULT_MAX_ROWS,
    ) -> Tensor:
        """Raw outputs ``[T, N, ...]``: K = ceil(T/M) samples per member in one pass."""
        x, generator = self._sample_inputs(x, samples, generator, seed)
        max_rows = resolve_max_rows(max_rows, x)
        state = _clone_generator(generator)
        try:
            return self._sample(x, samples, generator, max_rows)
        except _RetryChunk:  # vmap failed: redo everything with the member loop
            return self._sample(x, samples, state, max_rows)

    def _sample(
        self, x: Tensor, samples: int, generator: torch.Generator | None, max_rows: int | None
    ) -> Tensor:
        k = math.ceil(samples / self.members)
        self.net.eval()
        if not stochastic_modules(self.net):
            # members without randomness give K equal samples: forward each once and repeat
            per_chunk = len(x) if not max_rows else max(1, max_rows)
            with torch.no_grad():  # M small forwards: cheaper than stacking states for vmap
                out = torch.cat([self.net(c) for c in x.split(per_chunk)], 1).unsqueeze(1)
            return self._interleave(out.expand(-1, k, *out.shape[2:]), samples)  # [M,1,N,...]
        if self.config.method not in VMAP_SAFE or self._vmap_ok is False:
            ranges, per_chunk = chunk_plan(k, len(x), max_rows, 1)
            return self._interleave(self._member_loop(x, k, generator, ranges, per_chunk), samples)
        ranges, per_chunk = chunk_plan(k, len(x), max_rows, self.members)  # vmap: M rows per row
        with torch.no_grad(), self.member_methods[0].sampling(k, generator):
            out = forward_in_chunks(self.member_methods[0].net, x, ranges, per_chunk,
                               self._stacked_forward, group_dim=1)  # fmt: skip
        return self._interleave(out, samples)  # [T, N, ...]

    def _member_loop(
        self,
        x: Tensor,
        k: int,
        generator: torch.Generator | None,
        ranges: list[tuple[int, int]],
        per_chunk: int,
    ) -> Tensor:
        """Members one after the other, each in its own sampling block started from the same
        generator state: ``[M, K, N, ...]``."""
        outs = []
        for member in self.member_methods:
            with torch.no_grad(), member.sampling(k, _clone_generator(generator)):
                outs.append(forward_in_chunks(member.net, x, ranges, per_chunk, member.net, 0))
        return torch.stack(outs)

    def _interleave(self, out: Tensor, samples: int) -> Tensor:
        """``[M, K, N, ...]`` -> ``[T, N, ...]`` in k-major order, the first T."""
        m, k = out.shape[:2]
        return out.transpose(0, 1).reshape(k * m, *out.shape[2:])[:samples]

    def reference_samples(
        self, x: Tensor, samples: int, generator: torch.Generator | None = None
    ) -> Tensor:
        """Each member's own reference loop of K passes, every member starting from the same
        generator state (the draws member 0 makes in the one pass): ``[T, N, ...]``."""
        x = self._check_inputs(x)
        k = math.ceil(samples / self.members)
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
