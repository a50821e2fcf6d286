"""Test-time augmentation specs (``"flip,shift:2,noise:0.05"``): the transform kinds, their
defaults, and the spec parsed and formatted."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from bayesify.options.parsing import parse_option, shown


class Augmentation(StrEnum):
    """A transform kind of test-time augmentation (:class:`bayesify.TTA`), in a transform spec
    such as ``"flip,shift:2,noise:0.05"`` (:func:`parse_transforms`). Each (sample, row) pair
    draws its own transform."""

    FLIP = "flip"
    """Mirror the image left to right with probability 1/2 (no parameter). Images only."""
    SHIFT = "shift"
    """Translate by whole pixels, dy and dx uniform in ``-k .. k`` (``shift:k``, default 2);
    vacated pixels repeat the nearest edge pixel. Images only."""
    CROP = "crop"
    """Pad by ``p`` pixels by reflection and crop the original size at a uniform offset
    (``crop:p``, default 4; ``p`` below the image's height and width). Images only."""
    NOISE = "noise"
    """Add Gaussian noise of standard deviation ``σ`` to every input number (``noise:σ``,
    default 0.05), in the network's input units: standardised units for the table bundles
    bayesify trains (their inputs are standardised); images or tables."""


#: the parameter each transform kind takes when the spec gives none (None: takes none)
AUGMENTATION_DEFAULTS: dict[Augmentation, float | int | None] = {
    Augmentation.FLIP: None,
    Augmentation.SHIFT: 2,
    Augmentation.CROP: 4,
    Augmentation.NOISE: 0.05,
}


def parse_transforms(spec: Any) -> tuple[tuple[Augmentation, float | int | None], ...]:
    """A transform spec ``"flip,shift:2,noise:0.05"`` as ``((kind, parameter), ...)`` in the
    order given (the order they are applied in): ``shift``/``crop`` take a positive int,
    ``noise`` a positive number, ``flip`` none; a kind without ``:value`` gets its default
    (:data:`AUGMENTATION_DEFAULTS`). A bad spec is a one-line ``ValueError``."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(
            f"transforms must be a spec like 'flip,shift:2,noise:0.05', got {shown(spec)}"
        )
    out: list[tuple[Augmentation, float | int | None]] = []
    for item in spec.split(","):
        name, sep, raw = item.strip().partition(":")
        kind = parse_option(Augmentation, name.strip().lower(), option="transform")
        default = AUGMENTATION_DEFAULTS[kind]
        if not sep:
            out.append((kind, default))
            continue
        if default is None:
            raise ValueError(f"transform {kind.value} takes no value, got {item.strip()!r}")
        try:
            value: float | int = int(raw) if isinstance(default, int) else float(raw)
        except ValueError:
            what = "a positive int" if isinstance(default, int) else "a positive number"
            raise ValueError(f"transform {kind.value} takes {what}, got {raw.strip()!r}") from None
        if not value > 0 or value == float("inf"):
            raise ValueError(f"transform {kind.value} takes a value > 0, got {raw.strip()!r}")
        out.append((kind, value))
    return tuple(out)


def format_transforms(transforms: tuple[tuple[Augmentation, float | int | None], ...]) -> str:
    """The canonical spec of parsed transforms (``parse_transforms`` of it gives them back)."""
    return ",".join(k.value if v is None else f"{k.value}:{v!r}" for k, v in transforms)
