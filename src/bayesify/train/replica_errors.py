"""A failed DDP replica as one line for the caller: its own error type and message, or how its
process ended (torch hands the parent the child's whole traceback as text)."""

from __future__ import annotations

from torch.multiprocessing.spawn import ProcessException, ProcessExitedException

#: a replica's error type (the last line of its traceback) -> the one the caller sees
_ERROR_TYPES: dict[str, type[Exception]] = {
    "ValueError": ValueError,
    "ReplicasDiffer": ValueError,
    "DataError": ValueError,
    "TypeError": TypeError,
    "OSError": OSError,
    "FileNotFoundError": OSError,
    "PermissionError": OSError,
}


def replica_error(e: ProcessException) -> Exception:
    """A spawned replica's failure as one line (torch hands the parent the child's whole
    traceback as text): its own error type and message, or how the process ended."""
    who = f"training replica {e.error_index}"
    if isinstance(e, ProcessExitedException):
        how = f"signal {e.signal_name}" if e.signal_name else f"exit code {e.exit_code}"
        return RuntimeError(f"{who} ended with {how} before it finished")
    last = next((ln.strip() for ln in reversed(e.msg.splitlines()) if ln.strip()), "")
    name, _, message = last.partition(": ")
    kind = _ERROR_TYPES.get(name.rsplit(".", 1)[-1])
    if kind is None or not message:  # not the user's error: its type says what went wrong
        return RuntimeError(f"{who}: {last}")
    return kind(f"{who}: {message}")


class ReplicasDiffer(ValueError):
    """Replicas would train on other rows or options (raised by every replica at once)."""
