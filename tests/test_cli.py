"""The command line, end to end on real data (small settings)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from bayesify.cli import app
from bayesify.data import DataError, data_root

runner = CliRunner()


def _need_data():
    try:
        data_root()
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")


def test_methods_lists_mcbn():
    result = runner.invoke(app, ["methods"])
    assert result.exit_code == 0 and "mcbn" in result.output


def test_unknown_method_and_dataset_are_clear_errors():
    result = runner.invoke(app, ["train", "--method", "nope"])
    assert result.exit_code == 2 and "valid:" in result.output and "mcbn" in result.output
    result = runner.invoke(app, ["train", "--data", "iris"])
    assert result.exit_code == 2 and "unknown dataset 'iris'" in result.output


def test_train_then_evaluate_round_trip(tmp_path):
    _need_data()
    out = tmp_path / "yacht"
    args = ["train", "--method", "mcbn", "--data", "yacht", "--epochs", "3", "--out", str(out),
            "--option", "bank_size=8"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (out / "weights.safetensors").is_file() and (out / "config.json").is_file()
    result = runner.invoke(app, ["evaluate", str(out), "--samples", "10"])
    assert result.exit_code == 0, result.output
    assert "yacht" in result.output and "rmse" in result.output


def test_demo_writes_table_and_figures(tmp_path):
    _need_data()
    args = ["demo", "--out", str(tmp_path), "--datasets", "yacht", "--splits", "1",
            "--epochs", "5", "--samples", "20", "--toy-epochs", "5"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = (tmp_path / "uci_mcbn.md").read_text()
    assert "| yacht | MCBN | 1 |" in text and "| yacht | CUBN | 1 |" in text
    assert (tmp_path / "uncertainty_error_yacht.png").stat().st_size > 10_000
    assert (tmp_path / "toy_mcbn.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--datasets", "concrete,nope"], "unknown datasets ['nope']"),
        (["--datasets", ","], "no datasets given"),
        (["--splits", "6"], "less than or equal to 5"),
        (["--splits", "0"], "greater than or equal to 1"),
        (["--toy-epochs", "0"], "greater than or equal to 1"),
    ],
)
def test_demo_rejects_bad_options_before_any_work(args, message, tmp_path):
    result = runner.invoke(app, ["demo", "--out", str(tmp_path / "d"), *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.replace("│", " ").split())
    assert not (tmp_path / "d").exists()
