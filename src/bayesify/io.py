"""Bundles on disk: a folder with ``weights.safetensors`` and ``config.json``. Never pickle.

Writing is crash-safe: ``config.json`` is the commit point. A save that replaces a bundle writes
its new weights under a name the folder's current ``config.json`` does not use
(``weights-<sha256 prefix>.safetensors``), then replaces ``config.json`` (naming that file under
``"weights"``) in one atomic rename, and only then moves the weights to ``weights.safetensors``
(a link, a second atomic rename), drops the name from ``config.json`` and removes the rest. A
save killed at any moment leaves a folder that loads as the old bundle or the new one. Bundles
whose ``config.json`` names no weights file (every bundle written before) read
``weights.safetensors``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import Tensor

from bayesify.atomic import atomic_path, is_temporary, write_bytes, write_text

WEIGHTS = "weights.safetensors"
CONFIG = "config.json"
FORMAT_VERSION = 1
WEIGHTS_KEY = "weights"  # config.json's name of a weights file other than WEIGHTS (mid-save)
_PICKLE_SUFFIXES = {".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".bin"}
_HASHED = re.compile(r"weights-[0-9a-f]{16}\.safetensors")


class BundleError(ValueError):
    """A bundle folder is missing, incomplete or not in bayesify's format."""


def write_bundle(path: str | Path, tensors: dict[str, Tensor], config: dict[str, Any]) -> Path:
    """Write ``tensors`` (contiguous CPU copies) and ``config`` (JSON) into folder ``path``,
    replacing a bundle there so that a kill at any moment leaves the old one or the new one."""
    path = Path(path)
    if path.suffix in _PICKLE_SUFFIXES:
        raise BundleError(f"{path}: a bundle is a folder, not a {path.suffix} file")
    path.mkdir(parents=True, exist_ok=True)
    flat = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    data = safetensors_bytes(flat)
    config = {k: v for k, v in config.items() if k not in ("format", WEIGHTS_KEY)}
    current = _committed_weights(path)
    if current is not None and _holds(path / current, data):
        name = current  # the same weights (e.g. a new deferral policy): only the config changes
    else:
        name = (
            WEIGHTS
            if current != WEIGHTS
            else f"weights-{hashlib.sha256(data).hexdigest()[:16]}.safetensors"
        )
        write_bytes(path / name, data)
    _write_config(path, config, name)  # the commit: from here on the folder is the new bundle
    if name != WEIGHTS:
        _link_over(path / name, path / WEIGHTS)
        _write_config(path, config, WEIGHTS)
    _remove_leftovers(path)
    return path


def _committed_weights(path: Path) -> str | None:
    """The weights file the folder's ``config.json`` reads (None: no readable config)."""
    try:
        cfg = json.loads((path / CONFIG).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(cfg, dict):
        return None
    name = cfg.get(WEIGHTS_KEY, WEIGHTS)
    return name if isinstance(name, str) and _HASHED.fullmatch(name) else WEIGHTS


def _holds(file: Path, data: bytes) -> bool:
    """Whether ``file`` holds exactly ``data``."""
    try:
        return file.stat().st_size == len(data) and file.read_bytes() == data
    except OSError:
        return False


def _write_config(path: Path, config: dict[str, Any], weights: str) -> None:
    named = {} if weights == WEIGHTS else {WEIGHTS_KEY: weights}
    write_text(path / CONFIG, json.dumps({"format": FORMAT_VERSION, **config, **named}, indent=2))


def _link_over(src: Path, dst: Path) -> None:
    """Give ``dst`` the content of ``src`` atomically (a hard link where the system has them)."""
    with atomic_path(dst) as tmp:
        tmp.unlink()
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)


def _remove_leftovers(path: Path) -> None:
    """Weights files no config names and temporary files of earlier, interrupted saves."""
    for f in path.iterdir():
        ours = f.name.startswith((".weights", ".config")) and is_temporary(f)
        if ours or _HASHED.fullmatch(f.name):
            with contextlib.suppress(OSError):
                f.unlink()


def read_config(path: str | Path) -> tuple[dict[str, Any], Path]:
    """The bundle's config (a dict with ``"format"``) and its weights file; refuses pickles."""
    path = Path(path)
    if path.is_file() and path.suffix in _PICKLE_SUFFIXES:
        raise BundleError(
            f"{path} is a pickle file; bayesify refuses to unpickle (it can run arbitrary code). "
            "Load the weights into your network yourself and wrap it with from_pretrained()."
        )
    if not path.is_dir():
        raise BundleError(f"no bundle folder at {path}")
    config = path / CONFIG
    if not config.is_file():
        _missing(path, CONFIG)
    try:
        cfg = json.loads(config.read_text())
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise BundleError(f"{config} is not valid JSON: {e}") from None
    except RecursionError:
        raise BundleError(f"{config} is nested too deeply to be a bundle's config") from None
    if not isinstance(cfg, dict):
        raise BundleError(f"{config} is not a JSON object but a {type(cfg).__name__}")
    if cfg.get("format") != FORMAT_VERSION:
        raise BundleError(f"{config}: unsupported bundle format {cfg.get('format')!r}")
    name = cfg.pop(WEIGHTS_KEY, WEIGHTS)
    if name != WEIGHTS and not (isinstance(name, str) and _HASHED.fullmatch(name)):
        raise BundleError(f"{config}: {WEIGHTS_KEY!r} must name a weights file of the folder")
    weights = path / name
    if not weights.is_file():
        _missing(path, name)
    return cfg, weights


def _missing(path: Path, name: str) -> None:
    pickles = sorted(p.name for p in path.iterdir() if p.suffix in _PICKLE_SUFFIXES)
    hint = f" (found pickle files {pickles}: bayesify never unpickles)" if pickles else ""
    raise BundleError(f"bundle {path} has no {name}{hint}")


def tensor_specs(weights: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Name -> (dtype code, shape) of every tensor in a safetensors file, from its header only
    (nothing is allocated)."""
    try:
        with safe_open(str(weights), framework="pt") as f:
            names = list(f.keys())  # noqa: SIM118 - safe_open is not iterable
            return {k: (f.get_slice(k).get_dtype(), tuple(f.get_slice(k).get_shape()))
                    for k in names}  # fmt: skip
    except (SafetensorError, OSError, ValueError) as e:
        raise BundleError(
            f"{weights} is damaged or truncated ({e}); save the bundle again"
        ) from None


def read_weights(weights: Path) -> dict[str, Tensor]:
    """Every tensor of a safetensors file, on the CPU."""
    try:
        return load_file(str(weights), device="cpu")
    except (SafetensorError, OSError, ValueError) as e:
        raise BundleError(
            f"{weights} is damaged or truncated ({e}); save the bundle again"
        ) from None


def read_bundle(path: str | Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Read a bundle folder written by :func:`write_bundle`; refuses pickle files."""
    cfg, weights = read_config(path)
    return read_weights(weights), cfg
