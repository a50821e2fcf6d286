"""A toy job for the ``--cluster`` tests, in a module of its own so that the cluster's workers
can import it (the conftest puts this folder on their ``PYTHONPATH``)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SlowJob:
    method: str
    dataset: str
    split: int
    seed: int = 0
    markers: str = ""


def slow_square(job: SlowJob) -> dict[str, float]:
    """Leaves a file named after its split and process, then takes a while (split 0 longest)."""
    (Path(job.markers) / f"{job.split}-{os.getpid()}").write_text("")
    time.sleep(3.0 if job.split == 0 else 0.3)
    return {"value": float(job.split**2)}
