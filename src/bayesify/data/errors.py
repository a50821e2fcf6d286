"""The one error type of the data package."""

from __future__ import annotations

__all__ = ["DataError"]


class DataError(ValueError):
    """A data file, folder, dataset name or split is missing or wrong.

    The message always names the file or dataset and says what is wrong. Subclasses
    ``ValueError`` so callers that guard against bad input with ``except ValueError`` catch it.
    """
