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


def _said(result) -> str:
    """The command's output with rich's line wrapping and panel borders undone."""
    return " ".join(result.output.replace("│", " ").split())


def test_methods_lists_mcbn():
    from bayesify.methods import METHODS

    result = runner.invoke(app, ["methods"])
    assert result.exit_code == 0 and all(name in result.output for name in METHODS)
    assert "``" not in result.output  # docstring markup is not shown to users


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
    assert message in _said(result)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hidden", "50,0"], "hidden sizes must be >= 1"),
        (["--hidden", "5O"], "comma-separated integers"),
        (["--nproc", "0"], "greater than or equal to 1"),
        (["--limit", "0"], "greater than or equal to 1"),
        (["--epochs", "0"], "greater than or equal to 1"),
    ],
)
def test_train_rejects_bad_options(args, message, tmp_path):
    _need_data()
    out = tmp_path / "b"
    result = runner.invoke(app, ["train", "--data", "yacht", "--out", str(out), *args])
    assert result.exit_code == 2, result.output
    assert message in _said(result)
    assert not out.exists()


def test_train_checks_out_before_training(tmp_path, monkeypatch):
    import bayesify.app.jobs

    def no_training(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(bayesify.app.jobs, "build_training", no_training)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    result = runner.invoke(app, ["train", "--out", str(a_file)])
    assert result.exit_code == 2 and "is a file" in _said(result)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("x")
    result = runner.invoke(app, ["train", "--out", str(tmp_path / "full")])
    assert result.exit_code == 2 and "--overwrite" in _said(result)
    result = runner.invoke(app, ["train", "--out", str(a_file / "below")])
    assert result.exit_code == 2 and "cannot be written" in _said(result)


def test_train_limit_samples_no_eval_and_mc_dropout_default(tmp_path):
    _need_data()
    from bayesify.app.jobs import build_training
    from bayesify.methods import load

    job = build_training("mc-dropout", "yacht", limit=40, seed=3)
    full = build_training("mc-dropout", "yacht")
    x, x_full = job.train[0], full.train[0]
    assert len(x) == 40 and len(x_full) > 40
    rows = (x.unsqueeze(1) == x_full.unsqueeze(0)).all(-1)  # [40, N]: each a training row
    assert rows.any(1).all() and len(set(rows.int().argmax(1).tolist())) == 40
    assert job.method.rate == pytest.approx(0.05)

    out = tmp_path / "m"
    args = ["train", "--method", "mc-dropout", "--data", "yacht", "--epochs", "1",
            "--limit", "40", "--out", str(out), "--no-eval"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "saved" in result.output and "rmse" not in result.output
    assert "trained 1 epoch, final training loss" in _said(result)
    assert "kept epoch 1 (validation loss" in _said(result)
    assert load(out).rate == pytest.approx(0.05) and load(out).metadata["limit"] == 40
    result = runner.invoke(app, [*args[:-1], "--samples", "3"])
    assert result.exit_code == 2 and "--overwrite" in _said(result)
    result = runner.invoke(app, [*args[:-1], "--samples", "3", "--overwrite"])
    assert result.exit_code == 0 and "T = 3" in _said(result) and "rmse" in result.output
    result = runner.invoke(app, ["evaluate", str(out), "--samples", "4", "--limit", "7"])
    assert result.exit_code == 0 and "first 7 rows, T = 4" in _said(result)


def test_train_preset_paper_reaches_the_method_and_the_training_loop(tmp_path, monkeypatch):
    """`--preset paper`: the preset's config in the bundle, its optimiser / lr / batch size in
    the training loop, while --epochs still applies."""
    _need_data()
    import json

    import torch

    from bayesify.methods.core import training
    from bayesify.train import loader_batch_size

    seen = []
    real = training.train_loop

    def spy(model, objective, loader, optimizer, *, epochs, **kw):
        seen.append((type(optimizer), loader_batch_size(loader), epochs,
                     sorted(g["lr"] for g in optimizer.param_groups)))  # fmt: skip
        return real(model, objective, loader, optimizer, epochs=epochs, **kw)

    monkeypatch.setattr(training, "train_loop", spy)
    out = tmp_path / "b"
    args = ["train", "--method", "ibnn", "--data", "yacht", "--norm", "none", "--preset",
            "paper", "--epochs", "1", "--limit", "150", "--no-eval", "--out", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert seen == [(torch.optim.SGD, 128, 1, [0.05, 1.2])]
    config = json.loads((out / "config.json").read_text())
    text = json.dumps(config)
    assert '"mu_init_std": 0.75' in text and '"train_samples": 2' in text
    bad = runner.invoke(app, [*args[:-1], str(tmp_path / "c"), "--preset", "nope"])
    assert bad.exit_code == 2 and "unknown preset 'nope' for ibnn" in _said(bad)
