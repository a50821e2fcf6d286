"""The command line's structure: lazy commands, start-up without PyTorch, typed --option values."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from bayesify.cli import app
from bayesify.cli.bench import EXPERIMENTS, bench_app
from bayesify.data import DataError, data_root

runner = CliRunner()
HEAVY = ("torch", "scipy", "numpy", "matplotlib")


def _need_data():
    try:
        data_root()
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")


def _said(result) -> str:
    return " ".join(result.output.replace("│", " ").split())


@pytest.mark.parametrize("args", [["--help"], ["bench", "--help"], []])
def test_help_imports_no_numerics(args):
    """In a fresh interpreter: the listing needs neither torch, scipy, numpy nor matplotlib."""
    code = (
        "import json, sys\n"
        "from typer.testing import CliRunner\n"
        "from bayesify.cli import app\n"
        f"result = CliRunner().invoke(app, {args!r})\n"
        f"print(json.dumps([result.exit_code, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    exit_code, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert exit_code in (0, 2) and loaded == []  # no arguments: the help, exit code 2


def _lazy_entries():
    yield from ((app, name) for name in app.lazy_commands)
    yield from ((bench_app, name) for name in bench_app.lazy_commands)


# ids by name (an object's repr holds its address, which differs between pytest-xdist workers)
@pytest.mark.parametrize(
    ("group", "name"),
    list(_lazy_entries()),
    ids=[f"{'bench-' if g is bench_app else ''}{n}" for g, n in _lazy_entries()],
)
def test_listing_help_is_the_commands_own_help(group, name):
    entry = group.lazy_commands[name]
    command = entry.load()
    assert command.name == name
    assert " ".join(command.help.split()) == " ".join(entry.help.split())


def test_every_experiment_is_registered_once():
    names = [name for name, _, _ in EXPERIMENTS]
    assert len(set(names)) == len(names) == len(bench_app.lazy_commands)
    with pytest.raises(ValueError, match="registered twice"):
        bench_app.lazy_command(names[0], "x:y", "again")


def test_unknown_command_suggests_a_lazy_one():
    result = runner.invoke(app, ["trian"])
    assert result.exit_code == 2 and "train" in _said(result)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("bank_size=abc", "bank_size must be an int, got 'abc'"),
        ("statistics=batch", "unknown statistics 'batch'; valid: bank, gaussian"),
        ("bank_size", "--option takes key=value, got 'bank_size'"),
        ("banksize=3", "unknown MCBNConfig option(s) ['banksize']"),
    ],
)
def test_bad_method_option_is_a_one_line_error(option, message, tmp_path):
    _need_data()
    out = tmp_path / "m"
    args = ["train", "--data", "yacht", "--limit", "20", "--out", str(out), "--option", option]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in _said(result) and "Traceback" not in result.output
    assert not out.exists()


def test_same_seed_same_bundle_and_scores(tmp_path):
    """Two CLI training runs with one seed give identical weights and test scores, and a run
    leaves torch's global RNG as it found it."""
    _need_data()
    import torch
    from safetensors.torch import load_file

    outputs = []
    for run in ("a", "b"):
        torch.manual_seed(1234)
        before = torch.random.get_rng_state()
        args = ["train", "--method", "mc-dropout", "--data", "yacht", "--epochs", "2",
                "--limit", "60", "--samples", "5", "--seed", "3",
                "--out", str(tmp_path / run)]  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert torch.equal(torch.random.get_rng_state(), before)
        outputs.append((load_file(tmp_path / run / "weights.safetensors"), _said(result)))
    (wa, said_a), (wb, said_b) = outputs
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    trained = [re.search(r"trained 2 epochs.*?\)", said).group(0) for said in (said_a, said_b)]
    assert trained[0] == trained[1]  # losses
    assert said_a.split("T = 5")[1] == said_b.split("T = 5")[1]  # the test-set scores
