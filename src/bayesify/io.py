"""Bundles on disk: a folder with ``weights.safetensors`` and ``config.json``. Never pickle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

WEIGHTS = "weights.safetensors"
CONFIG = "config.json"
FORMAT_VERSION = 1
_PICKLE_SUFFIXES = {".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".bin"}


class BundleError(ValueError):
    """A bundle folder is missing, incomplete or not in bayesify's format."""


def write_bundle(path: str | Path, tensors: dict[str, Tensor], config: dict[str, Any]) -> Path:
    """Write ``tensors`` (contiguous CPU copies) and ``config`` (JSON) into folder ``path``."""
    path = Path(path)
    if path.suffix in _PICKLE_SUFFIXES:
        raise BundleError(f"{path}: a bundle is a folder, not a {path.suffix} file")
    path.mkdir(parents=True, exist_ok=True)
    flat = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    save_file(flat, str(path / WEIGHTS))
    (path / CONFIG).write_text(json.dumps({"format": FORMAT_VERSION, **config}, indent=2))
    return path


def read_bundle(path: str | Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Read a bundle folder written by :func:`write_bundle`; refuses pickle files."""
    path = Path(path)
    if path.is_file() and path.suffix in _PICKLE_SUFFIXES:
        raise BundleError(
            f"{path} is a pickle file; bayesify refuses to unpickle (it can run arbitrary code). "
            "Load the weights into your network yourself and wrap it with from_pretrained()."
        )
    if not path.is_dir():
        raise BundleError(f"no bundle folder at {path}")
    weights, config = path / WEIGHTS, path / CONFIG
    for f in (weights, config):
        if not f.is_file():
            pickles = sorted(p.name for p in path.iterdir() if p.suffix in _PICKLE_SUFFIXES)
            hint = f" (found pickle files {pickles}: bayesify never unpickles)" if pickles else ""
            raise BundleError(f"bundle {path} has no {f.name}{hint}")
    try:
        cfg = json.loads(config.read_text())
    except json.JSONDecodeError as e:
        raise BundleError(f"{config} is not valid JSON: {e}") from None
    if cfg.get("format") != FORMAT_VERSION:
        raise BundleError(f"{config}: unsupported bundle format {cfg.get('format')!r}")
    try:
        tensors = load_file(str(weights), device="cpu")
    except SafetensorError as e:
        msg = f"{weights} is damaged or truncated ({e}); save the bundle again"
        raise BundleError(msg) from None
    return tensors, cfg


def resize_like(module: torch.nn.Module, state: dict[str, Tensor]) -> None:
    """Give buffers whose size depends on data (e.g. statistics banks) the saved shapes."""
    for name, buf in list(module.named_buffers()):
        if name in state and state[name].shape != buf.shape:
            owner_name, _, attr = name.rpartition(".")
            owner = module.get_submodule(owner_name) if owner_name else module
            setattr(owner, attr, torch.empty_like(state[name], device=buf.device, dtype=buf.dtype))
