"""The one line naming the machine a benchmark ran on, for every report."""

from __future__ import annotations

import os
import platform

import torch


def machine_description(device: str = "cpu") -> str:
    """CPU model, logical CPUs, OS, Python, torch and its thread count (and the GPU on CUDA).

    The CPU model is read from ``/proc/cpuinfo`` (``platform.processor()`` is empty on Linux).
    """
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    text = (f"{cpu}, {os.cpu_count()} logical CPUs (shared), {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}, torch {torch.__version__}, "
            f"torch threads {torch.get_num_threads()}")  # fmt: skip
    if device.startswith("cuda") and torch.cuda.is_available():
        text += f", GPU {torch.cuda.get_device_name(torch.device(device))}"
    return text


def machine_label(ran: bool) -> str:
    """The label of a page's machine line: ``Machine``, or, for a call that ran no job (every
    row imported or already done), words saying the line names this call's machine, not where
    the rows were made."""
    if ran:
        return "Machine"
    return ("Machine of this call, which ran no job (its rows were made earlier; the page's "
            "notes say where)")  # fmt: skip
