"""``--threads`` reaches torch in every command that runs a network (one helper, one help)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from bayesify.cli import app
from bayesify.cli.common import set_threads

runner = CliRunner()


def test_set_threads_sets_torchs_threads_and_none_leaves_them():
    before = torch.get_num_threads()
    try:
        set_threads(3)
        assert torch.get_num_threads() == 3
        set_threads(None)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--method", "nope", "--out", "{tmp}/b"],
        ["predict", "{tmp}/missing", "{tmp}/rows.csv", "--out", "{tmp}/out.csv"],
        ["calibrate", "{tmp}/missing", "--coverage", "0.9"],
        ["serve", "{tmp}/missing"],
    ],
    ids=lambda a: a[0],
)
def test_every_command_hands_threads_to_torch(args, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = runner.invoke(app, [*args, "--threads", "3"])
    assert result.exit_code == 2, result.output  # a one-line error after the threads are set
    assert calls == [3]
    assert "Traceback" not in result.output


def test_threads_reach_torch_in_a_fresh_cli_process(tmp_path):
    code = (
        "import json, torch\n"
        "from typer.testing import CliRunner\n"
        "from bayesify.cli import app\n"
        "before = torch.get_num_threads()\n"
        f"args = ['predict', {str(tmp_path / 'missing')!r}, 'rows.csv', '--out', 'o.csv']\n"
        "result = CliRunner().invoke(app, [*args, '--threads', str(before + 1)])\n"
        "print(json.dumps([before, torch.get_num_threads(), result.exit_code]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after, exit_code = json.loads(out.stdout.strip().splitlines()[-1])
    assert after == before + 1 and exit_code == 2
