"""Wrapping an already-trained network: ``Method.from_pretrained``, one signature for every
method, with a ``_from_pretrained`` hook per method whose keywords are the method's own options.

:class:`FromPretrained` is a mixin of :class:`~bayesify.methods.core.base.Method`; it relies on the
method's constructor, ``fit``, ``fit_noise`` and config.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any, ClassVar, Self

from bayesify.options import shown
from bayesify.predictive import Task
from bayesify.train import Data, as_dataset

if TYPE_CHECKING:
    from bayesify.methods.core.config import MethodConfig

#: the arguments every ``_from_pretrained`` hook takes; the rest are the method's own options
HOOK_ARGUMENTS = frozenset({"self", "train", "val", "batch_size", "seed", "progress"})


def hook_options(hook: Callable[..., Any]) -> tuple[set[str], bool]:
    """The method-specific keyword options of a ``_from_pretrained`` hook, and whether it takes
    any keyword (``**kwargs``)."""
    params = inspect.signature(hook).parameters.values()
    names = {p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name not in HOOK_ARGUMENTS}
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


def split_options(
    owner: str, config_cls: type, hook: Callable[..., Any], options: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``options`` split into config fields and hook options; an option that is neither is a
    ``ValueError`` listing the valid ones (``owner``: e.g. ``"MCBN.from_pretrained"``)."""
    config_names = {f.name for f in fields(config_cls)}
    names, takes_any = hook_options(hook)
    unknown = sorted(k for k in options if k not in config_names | names)
    if unknown and not takes_any:
        valid = ", ".join(sorted(config_names | names))
        raise ValueError(f"unknown option(s) {unknown} for {owner}; valid: {valid}")
    config = {k: v for k, v in options.items() if k in config_names}
    return config, {k: v for k, v in options.items() if k not in config_names}


class FromPretrained:
    """``from_pretrained`` and its default hook (mixed into :class:`Method`)."""

    Config: ClassVar[type[MethodConfig]]
    config: MethodConfig

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
        preset: str | None = None,
        **options: Any,
    ) -> Self:
        """Wrap an already-trained network (a copy of it unless ``inplace=True``).

        ``train``: training data where the method needs it (MCBN's statistics bank, IBNN's
        node posterior, optional fine-tuning); ``val``: for regression, τ⁻¹ is fitted on it.
        Both may be ``(X, y)`` tensors, a Dataset or a DataLoader. ``batch_size``: the
        mini-batch size the method uses on ``train`` (for MCBN the size the network was trained
        with; a DataLoader's own batch size is used when it is not given). ``options`` are the
        method's config fields and its own ``from_pretrained`` options (e.g. MCBN's
        ``bank_size``, IBNN's ``epochs``, MC dropout's ``dropout``/``where``); an unknown one is
        a ``ValueError`` listing the valid ones. ``preset``: a paper preset
        (:mod:`bayesify.methods.core.presets`), as for the constructor.
        """
        owner = f"{cls.__name__}.from_pretrained"
        config, hook = split_options(owner, cls.Config, cls._from_pretrained, options)
        method = cls(net, inplace=inplace, preset=preset, task=task, **config)
        for data in (train, val):
            if data is not None:
                method._remember_input_shape(as_dataset(data))
                break
        method._from_pretrained(
            train, val, batch_size=batch_size, seed=seed, progress=progress, **hook
        )
        return method

    def _default_from_pretrained(
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
            raise ValueError(f"epochs must be an int >= 0, got {shown(epochs)}")
        if epochs > 0:
            if train is None:
                raise ValueError(f"fine-tuning for epochs={epochs} needs training data (train)")
            bs = batch_size or 32
            self.fit(train, val, epochs=epochs, batch_size=bs, lr=lr, seed=seed, progress=progress)
            return
        self._fit_noise_on(val, seed)

    #: the hook: ``(train, val, *, batch_size, seed, progress, **the method's own options)``;
    #: each method's hook has its own keyword options, so the signatures differ by design
    _from_pretrained: Callable[..., None] = _default_from_pretrained

    def _fit_noise_on(self, val: Data | None, seed: int) -> None:
        """Fit τ⁻¹ on ``val`` for regression (nothing without ``val`` or for classification)."""
        if val is not None and self.config.task is Task.REGRESSION:
            self.fit_noise(val, seed=seed)
