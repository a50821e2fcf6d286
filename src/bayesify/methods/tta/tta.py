"""Test-time augmentation (Ashukha et al. 2020) over any method, predicted in one pass.

``TTA(net, transforms="flip,shift:2")`` predicts with T augmented copies of every input: sample
group t of the one pass over ``T*N`` rows holds the inputs transformed by group t's own draws
(:class:`~bayesify.nn.augment.Augment` in front of the network). It wraps a member method the
way :class:`~bayesify.methods.ensemble.ensemble.DeepEnsemble` does (``method=``,
``method_options=``; default the plain network, :class:`Deterministic`), so
``TTA(net, method=MCDropout)`` gives sample t both its dropout masks and its augmentation: the
member draws first (the draws it makes alone from the same generator), the augmentations after.

The member method trains as it would alone (``fit`` trains the member; no augmentation at
training time); ``from_pretrained`` runs the member's own step (e.g. MCBN's bank) and, for
regression, fits τ⁻¹ of the augmented predictive on ``val``. Bundles record the transform spec
and the member's name and options in ``config.json``; the member's fitted state is in
``extra``. An ensemble cannot be the member (its own pass stacks members); TTA of TTA neither.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor, nn

from bayesify.methods.core.base import Method, MethodConfig, member_class
from bayesify.methods.core.deterministic import Deterministic
from bayesify.methods.core.pretrained import hook_options
from bayesify.nn import sampling
from bayesify.nn.augment import Augment, check_augmentable
from bayesify.options import format_transforms, parse_transforms, shown
from bayesify.train import Data, as_dataset


@dataclass(frozen=True)
class TTAConfig(MethodConfig):
    """``transforms``: the augmentations, a spec like ``"flip,shift:2,noise:0.05"`` applied
    in the order given, each (sample, row) pair drawing its own: flip (mirror left to right
    with probability 1/2), shift:k (translate by -k..k whole pixels, edge pixels repeated;
    default 2), crop:p (pad p pixels by reflection and crop; default 4), noise:σ (Gaussian
    noise in the network's input units, standardised for table bundles; default 0.05);
    ``method``: the member method whose samples are augmented (its class, such as
    ``bayesify.MCDropout``; bundles store its name); ``method_options``: its options
    (JSON-able)."""

    transforms: str = "flip,shift:2"
    method: type[Method] = field(default=Deterministic, metadata={"method_class": True})
    method_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        canonical = format_transforms(parse_transforms(self.transforms))
        object.__setattr__(self, "transforms", canonical)
        _member_class(self.method)
        if not isinstance(self.method_options, dict):
            raise ValueError(f"method_options must be a dict, got {shown(self.method_options)}")

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "method": self.method.name}


def _member_class(method: Any) -> type[Method]:
    """The member method class; a name, an ensemble or a TTA is a clear error."""
    member = member_class(method, "TTA")
    if member.name in ("ensemble", "tta"):
        raise ValueError(f"TTA cannot wrap {member.name!r}: the member must be a single method")
    return member


def _check_member_options(member: Method, options: dict[str, Any]) -> None:
    """Refuse options the member's ``from_pretrained`` step does not take (one line; a member
    config field is named as belonging in ``method_options``)."""
    names, takes_any = hook_options(type(member)._from_pretrained)
    unknown = sorted(set(options) - names)
    if not unknown or takes_any:
        return
    config = {f.name for f in fields(member.Config)}
    valid = ", ".join(sorted(names | {f.name for f in fields(TTAConfig)})) or "none"
    hint = (f"; {member.name}'s own options go in method_options={{...}}"
            if set(unknown) & config else "")  # fmt: skip
    raise ValueError(f"unknown option(s) {unknown} for TTA.from_pretrained; valid: {valid}{hint}")


class Augmented(nn.Module):
    """``augment`` then the member's network: ``[N, ...]`` -> the member's outputs."""

    def __init__(self, augment: Augment, net: nn.Module) -> None:
        super().__init__()
        self.augment = augment
        self.net = net

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.net(self.augment(x))
        return out


class TTA(Method):
    """Test-time augmentation: T augmented copies of each input in one pass, over any method."""

    name = "tta"
    Config = TTAConfig
    config: TTAConfig

    def _prepare(self, net: nn.Module) -> None:
        cfg = self.config
        options: dict[str, Any] = {"task": cfg.task, "noise_objective": cfg.noise_objective,
                   "noise_samples": cfg.noise_samples, "likelihood": cfg.likelihood}  # fmt: skip
        options.update(cfg.method_options)
        self.member = _member_class(cfg.method)(net, inplace=True, **options)
        self.augment = Augment(parse_transforms(cfg.transforms))
        self.net = Augmented(self.augment, self.member.net)
        self.net.bayesify_spec = getattr(net, "bayesify_spec", None)

    @contextmanager
    def sampling(self, samples: int, generator: torch.Generator | None) -> Iterator[None]:
        """The member's sampling block (its own draws first), then the augmentations'."""
        with self.member.sampling(samples, generator), sampling(self.augment, samples, generator):
            yield

    def sample_count(self, samples: int) -> int:
        return self.member.sample_count(samples)

    def _check_inputs(self, x: Tensor | Data) -> Tensor:
        x = super()._check_inputs(x)
        check_augmentable(self.augment.transforms, tuple(x.shape[1:]))
        return x

    # ------------------------------------------------------------------ training
    def fit(self, train: Data, val: Data | None = None, *, seed: int = 0, **kwargs: Any) -> TTA:
        """Train the member method as it trains alone (same options as :meth:`Method.fit`;
        no augmentation while training); for regression with ``val``, fit τ⁻¹ of the
        augmented predictive afterwards."""
        self.member.fit(train, val, seed=seed, **kwargs)
        self.history = self.member.history
        self._remember_input_shape(as_dataset(train))
        self._take_member_noise()
        if val is not None and self.config.task.value == "regression":
            self.fit_noise(val, seed=seed)
        return self

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
        """The member's own ``from_pretrained`` step (e.g. MCBN fills its bank from
        ``train``), then τ⁻¹ of the augmented predictive on ``val``. ``member_options``: the
        member method's ``from_pretrained`` options."""
        _check_member_options(self.member, member_options)
        self.member.input_shape = self.input_shape
        self.member._from_pretrained(train, None, batch_size=batch_size, seed=seed,
                                     progress=progress, **member_options)  # fmt: skip
        self._take_member_noise()
        self._fit_noise_on(val, seed)

    def _take_member_noise(self) -> None:
        if self.member.noise_fitted:
            self.noise_variance = self.member.noise_variance

    # ------------------------------------------------------------------ bundles
    def extra_state(self) -> dict[str, Any]:
        mm = self.member
        return {
            "member": {
                "noise_variance": mm.noise_variance,
                "noise_fitted": mm.noise_fitted,
                "constant_variance": mm.constant_variance,
                "input_shape": list(mm.input_shape) if mm.input_shape else None,
                "extra": mm.extra_state(),
            }
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        s = state.get("member")
        if not s:
            return
        mm = self.member
        mm.noise_variance = float(s["noise_variance"])
        mm.noise_fitted = bool(s.get("noise_fitted", True))
        mm.constant_variance = s.get("constant_variance")
        mm.input_shape = tuple(s["input_shape"]) if s.get("input_shape") else None
        mm.load_extra_state(s.get("extra", {}))
