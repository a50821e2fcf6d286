"""Saving a method as a bundle folder: ``weights.safetensors`` + ``config.json`` (never pickle).

:func:`bayesify.methods.registry.load` reads it back.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayesify.io import write_bundle

if TYPE_CHECKING:
    from bayesify.methods.core.base import Method


def bundle_config(method: Method) -> dict[str, Any]:
    """The JSON half of ``method``'s bundle: method name, config, model spec, fitted noise,
    input shape, free metadata, preprocessing and the method's extra state."""
    shape = method.input_shape
    return {
        "method": method.name,
        "config": method.config.to_dict(),
        "model": getattr(method.net, "bayesify_spec", None) or method.architecture,
        "network_class": method.network_class,
        "noise_variance": method.noise_variance,
        "noise_fitted": method.noise_fitted,
        "constant_variance": method.constant_variance,
        "input_shape": list(shape) if shape is not None else None,
        "metadata": method.metadata,
        "preprocessing": method.preprocessing.to_dict() if method.preprocessing else None,
        "extra": method.extra_state(),
    }


def save_bundle(method: Method, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``method`` as a bundle folder at ``path``; an existing file or non-empty folder is
    refused unless ``overwrite=True``.

    The network is rebuilt on load from its factory spec (our model factories record it) or,
    for an ``nn.Sequential`` of standard torch layers, from its JSON layer list; any other
    network is passed again to :func:`bayesify.load` as ``net=`` (or ``--net module:factory``).
    """
    path = Path(path)
    if not overwrite and (path.is_file() or (path.is_dir() and any(path.iterdir()))):
        raise FileExistsError(
            f"{path} already exists and is not empty; pass overwrite=True to replace it"
        )
    return write_bundle(path, method.net.state_dict(), bundle_config(method))
