"""Saving a method as a bundle folder: ``weights.safetensors`` + ``config.json`` (never pickle).

:class:`Bundled` is a mixin of :class:`~bayesify.methods.core.base.Method` (as
:class:`~bayesify.methods.core.pretrained.FromPretrained` is); it reads the method's attributes
and imports nothing of the method's own module. :func:`bayesify.methods.registry.load` reads the
bundle back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bayesify.io import write_bundle


class Bundled:
    """``save`` and the JSON half of a bundle, for :class:`~bayesify.methods.core.base.Method`."""

    def extra_state(self) -> dict[str, Any]:
        """JSON-able state beyond the network's weights, saved in bundles."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` saved."""

    def bundle_config(self) -> dict[str, Any]:
        """The JSON half of the bundle: method name, config, model spec, fitted noise, input
        shape, free metadata, preprocessing and the method's extra state."""
        m: Any = self  # a Method: the attributes below are its own
        shape = m.input_shape
        return {
            "method": m.name,
            "config": m.config.to_dict(),
            "model": getattr(m.net, "bayesify_spec", None) or m.architecture,
            "network_class": m.network_class,
            "noise_variance": m.noise_variance,
            "noise_fitted": m.noise_fitted,
            "constant_variance": m.constant_variance,
            "input_shape": list(shape) if shape is not None else None,
            "metadata": m.metadata,
            "preprocessing": m.preprocessing.to_dict() if m.preprocessing else None,
            "extra": self.extra_state(),
        }

    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write the method as a bundle folder at ``path``; an existing file or non-empty folder
        is refused unless ``overwrite=True``.

        The network is rebuilt on load from its factory spec (our model factories record it) or,
        for an ``nn.Sequential`` of standard torch layers, from its JSON layer list; any other
        network is passed again to :func:`bayesify.load` as ``net=`` (or ``--net module:factory``).
        """
        path = Path(path)
        if not overwrite and (path.is_file() or (path.is_dir() and any(path.iterdir()))):
            raise FileExistsError(
                f"{path} already exists and is not empty; pass overwrite=True to replace it"
            )
        m: Any = self
        return write_bundle(path, m.net.state_dict(), self.bundle_config())
