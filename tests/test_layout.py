"""The house's layout rules that no linter checks: every Python file of the package, its tests
and its benchmarks has at most 400 lines (DEVELOPERS.md; issue 41's "no file over 400 lines")."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 400


def tracked_python_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [ROOT / name for name in out.split()]


def test_no_python_file_is_over_400_lines():
    files = tracked_python_files()
    assert len(files) > 300  # the package, its tests and benchmarks, not an empty listing
    long = {
        str(f.relative_to(ROOT)): n
        for f in files
        if f.exists() and (n := len(f.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert long == {}, f"split these files (lines): {long}"
