"""The sampling policy a calibration holds for: fixed T, or adaptive start / max / tolerance.

A conformal quantile or a deferral threshold is fitted on scores computed from Monte Carlo
samples; its guarantee holds for predictions drawn with the same randomness law, i.e. the same
policy (:mod:`bayesify.methods.core.adaptive` for the adaptive one). Bundles record it, and the
predictor compares it with the policy it serves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SamplingPolicy:
    """``samples`` T (fixed), or ``tol`` with ``start`` / ``max_samples`` (adaptive)."""

    samples: int | None = None
    tol: float | None = None
    start: int = 8
    max_samples: int = 32

    def __post_init__(self) -> None:
        if (self.samples is None) == (self.tol is None):
            raise ValueError("a sampling policy is a fixed samples T or an adaptive tol")
        if self.samples is not None:
            if isinstance(self.samples, bool) or not isinstance(self.samples, int):
                raise ValueError(f"samples must be a positive integer, got {self.samples!r}")
            if self.samples < 1:
                raise ValueError(f"samples must be a positive integer, got {self.samples!r}")
        else:
            from_ = (self.tol, self.start, self.max_samples)
            tol = float(self.tol)  # type: ignore[arg-type]
            if not (math.isfinite(tol) and tol >= 0):
                raise ValueError(f"tol must be a finite number >= 0, got {self.tol!r}")
            object.__setattr__(self, "tol", tol)
            if not all(isinstance(v, int) and v >= 2 for v in from_[1:]):
                raise ValueError(f"start and max_samples must be integers >= 2, got {from_[1:]}")

    @classmethod
    def fixed(cls, samples: int) -> SamplingPolicy:
        return cls(samples=samples)

    @classmethod
    def adaptive(cls, tol: float, start: int = 8, max_samples: int = 32) -> SamplingPolicy:
        return cls(tol=tol, start=start, max_samples=max_samples)

    @property
    def is_adaptive(self) -> bool:
        return self.tol is not None

    @property
    def least_samples(self) -> int:
        """The fewest samples any row gets under this policy."""
        return self.start if self.is_adaptive else int(self.samples)  # type: ignore[arg-type]

    def label(self) -> str:
        """``T=32`` or ``adaptive tol=0.01 T=8..32``."""
        if self.is_adaptive:
            return f"adaptive tol={self.tol:g} T={self.start}..{self.max_samples}"
        return f"T={self.samples}"

    def to_dict(self) -> dict[str, Any]:
        if self.is_adaptive:
            return {"mode": "adaptive", "tol": self.tol, "start": self.start,
                    "max_samples": self.max_samples}  # fmt: skip
        return {"mode": "fixed", "samples": self.samples}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SamplingPolicy:
        if not isinstance(d, dict) or d.get("mode") not in ("fixed", "adaptive"):
            raise ValueError(f"not a sampling policy: {d!r:.80}")
        if d["mode"] == "fixed":
            return cls.fixed(d.get("samples"))  # type: ignore[arg-type]
        return cls.adaptive(d.get("tol"), d.get("start", 8), d.get("max_samples", 32))  # type: ignore[arg-type]

    @classmethod
    def parse(cls, text: str) -> SamplingPolicy:
        """``"32"`` (fixed T) or ``"adaptive:TOL[:START:MAX]"`` (e.g. ``adaptive:0.01:8:32``)."""
        parts = str(text).strip().split(":")
        try:
            if parts[0] == "adaptive" and len(parts) in (2, 4):
                ints = [int(p) for p in parts[2:]] or [8, 32]
                return cls.adaptive(float(parts[1]), *ints)
            if len(parts) == 1:
                return cls.fixed(int(parts[0]))
        except ValueError as e:
            if "policy" in str(e) or "must be" in str(e):
                raise ValueError(f"sampling policy {text!r}: {e}") from None
        raise ValueError(f"sampling policy {text!r}: give a sample count T (e.g. 32) or "
                         "adaptive:TOL[:START:MAX] (e.g. adaptive:0.01:8:32)")  # fmt: skip


def parse_policies(text: str) -> list[SamplingPolicy]:
    """A comma-separated list of :meth:`SamplingPolicy.parse` items, duplicates dropped."""
    out: list[SamplingPolicy] = []
    for item in str(text).split(","):
        if item.strip():
            p = SamplingPolicy.parse(item)
            if p not in out:
                out.append(p)
    if not out:
        raise ValueError("give at least one sampling policy (e.g. 8,32,100)")
    return out
