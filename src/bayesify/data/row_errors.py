"""Why rows cannot be used, in one wording everywhere: the row -> reason map, the range a number
feature may take, and the one-line messages the library, the CLI and the server give."""

from __future__ import annotations

import numpy as np

#: row index (0-based, within the inputs handed in) -> why the row cannot be used
RowErrors = dict[int, str]

#: how far beyond the training rows' extremes a number feature may go, in training standard
#: deviations: far enough for any real extrapolation, near enough to catch sentinels (1e30),
#: overflow and unit mix-ups of several orders of magnitude
RANGE_MARGIN = 100.0
#: the largest float32 (networks read float32 unless they were converted)
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: problems listed in one error before "and N more"
MAX_LISTED = 10


def overflow_message(value: float) -> str:
    """The one wording of a value beyond float32, in Python, the CLI and the server."""
    return f"{value:g} is beyond the float32 range (±{FLOAT32_MAX:.4g})"


def bound_message(value: float, low: float, high: float) -> str:
    """The one wording of a value outside the range a bundle records from its training rows."""
    return (
        f"{value:g} is outside the range this model accepts [{low:.6g}, {high:.6g}] (the "
        f"training rows' extremes ± {RANGE_MARGIN:g} standard deviations)"
    )


def describe_row_errors(bad: RowErrors, limit: int = MAX_LISTED) -> str:
    """Every problem of ``bad`` in one line, rows with the same problem together:
    ``row 3: column 'b': missing value`` or ``rows 2, 9: ...; row 5: ...`` (at most ``limit``
    problems, then how many more)."""
    groups: dict[str, list[int]] = {}
    for row in sorted(bad):
        groups.setdefault(bad[row], []).append(row)
    parts = []
    for why, rows in list(groups.items())[:limit]:
        listed = ", ".join(str(r) for r in rows[:5])
        extra = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
        parts.append(f"row{'s' * (len(rows) > 1)} {listed}{extra}: {why}")
    if len(groups) > limit:
        parts.append(f"and {len(groups) - limit} more problem(s)")
    text = "; ".join(parts)
    return text if len(bad) == 1 else f"{len(bad)} rows cannot be used: {text}"
