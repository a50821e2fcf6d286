"""Paper presets: each method's recipe as its paper states it, selectable by name.

``bayesify.IBNN(net, preset="paper")`` builds the method with the preset's config overrides
(options given beside it win), and its :meth:`~bayesify.methods.core.base.Method.fit` then uses the
preset's training recipe (optimiser, learning rate, weight decay, epochs, batch size, ...) for every
keyword the call leaves out. ``bayesify train --preset paper`` does the same on the command line.
``get_preset(method, name)`` returns the :class:`Preset`; ``docs/fidelity.md`` says, per paper,
what each preset restores and why our defaults differ.

``"paper"`` is defined for every method; IBNN also has ``"paper-pretrained"`` (Trinh et al.'s
fine-tuning of a trained network, for ``IBNN.from_pretrained``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from bayesify.methods.core.preset_table import RECIPES, Preset

__all__ = ["PRESETS", "Preset", "apply_preset", "get_preset", "preset_names", "with_recipe"]

F = TypeVar("F", bound=Callable[..., Any])

PRESETS: dict[tuple[str, str], Preset] = {(p.method, p.name): p for p in RECIPES}


def preset_names(method: str) -> list[str]:
    """The presets defined for ``method`` (its registry name)."""
    return [name for m, name in PRESETS if m == method]


def get_preset(method: str, name: str) -> Preset:
    """The preset ``name`` of ``method``; the error lists the valid names."""
    try:
        return PRESETS[(method, name)]
    except KeyError:
        valid = ", ".join(preset_names(method)) or "none"
        raise ValueError(f"unknown preset {name!r} for {method}; valid: {valid}") from None


def apply_preset(
    method: str, preset: str | None, options: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``options`` over the preset's config, and the preset's ``fit`` keyword arguments (which
    become ``fit()``'s defaults); without a preset, ``options`` and ``{}``."""
    if preset is None:
        return options, {}
    recipe = get_preset(method, preset)
    return {**recipe.config, **options}, dict(recipe.fit)


def with_recipe(fit: F) -> F:
    """Decorate a ``fit``: keyword arguments the call leaves out come from ``self.recipe``
    (the preset's ``fit`` dict; empty without a preset)."""
    signature = inspect.signature(fit)

    @functools.wraps(fit)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        recipe = getattr(self, "recipe", None)
        if recipe:
            given = set(signature.bind_partial(self, *args, **kwargs).arguments) | set(kwargs)
            kwargs = {**{k: v for k, v in recipe.items() if k not in given}, **kwargs}
        return fit(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
