"""A schemathesis run over the server's OpenAPI document, every endpoint: no 5xx, every status
code and response body as documented, schema-violating requests rejected. (Schema-valid rows of
the wrong shape are rightly rejected, so positive-data acceptance is not checked: the schema
cannot say that the bundle reads rows of 4 numbers.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance,negative_data_rejection")  # fmt: skip


def test_schemathesis_finds_no_server_errors(server, tmp_path):
    st = shutil.which("st") or str(Path(sys.executable).parent / "st")
    if not Path(st).exists():
        pytest.skip("schemathesis is not installed (pip install -e '.[test]')")
    out = subprocess.run(
        [st, "run", f"{server.url}/openapi.json", "--checks", CHECKS, "--max-examples", "25",
         "--seed", "1", "--generation-database", "none", "--request-timeout", "60",
         "--exclude-checks", "positive_data_acceptance"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,  # its cache stays out
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "Unresolvable references" not in out.stdout
    tested = [line for line in out.stdout.splitlines() if "Tested:" in line]
    assert tested and tested[0].split()[-1] == "18", tested  # every operation
