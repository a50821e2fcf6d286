"""``bayesify --version``: the installed distribution's version, printed without PyTorch."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import bayesify

HEAVY = ("torch", "scipy", "numpy", "matplotlib", "pandas")


def test_version_is_the_installed_metadata_and_imports_no_numerics():
    code = (
        "import json, sys\n"
        "from typer.testing import CliRunner\n"
        "from bayesify.cli import app\n"
        "result = CliRunner().invoke(app, ['--version'])\n"
        "print(json.dumps([result.exit_code, result.output,"
        f" [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    exit_code, said, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert (exit_code, said, loaded) == (0, f"bayesify {version('bayesify')}\n", [])


def test_console_script_prints_the_version():
    script = Path(sys.executable).with_name("bayesify")
    out = subprocess.run([script, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["bayesify", version("bayesify")]


def test_package_version_is_the_metadata_version():
    assert bayesify.__version__ == version("bayesify")
