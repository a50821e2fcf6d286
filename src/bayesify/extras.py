"""The error raised where an optional extra (``pip install 'bayesify[NAME]'``) is needed and not
installed. It imports nothing, so a module can name it without importing what the extra is for."""

from __future__ import annotations


class MissingExtra(ImportError):
    """An optional dependency is not installed: one line naming the extra to install."""
