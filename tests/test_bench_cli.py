"""`bayesify bench <name>`: every benchmark is a sub-command, built from its options dataclass."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar

import pytest
import torch
import typer
from typer.testing import CliRunner

from bayesify.bench.options import add_bench_command, command_line
from bayesify.cli import app

runner = CliRunner()

#: Each `bayesify bench` command with its options' documented defaults, as `--help` shows them.
COMMANDS = {
    "bn-noise": {
        "--bundle": "/tmp/bayesify_bn_lenet",
        "--out": "benchmarks/bn_noise",
        "--n-train": "10000",
        "--batch-sizes": "8,16,32,64,128,256",
        "--repeats": "64",
        "--seed": "0",
    },
    "coverage": {
        "--datasets": "bostonHousing,concrete,energy",
        "--methods": "mcbn,mc-dropout",
        "--splits": "20",
        "--epochs": "40",
        "--samples": "50",
        "--calibration": "0.67",
        "--level": "0.9",
        "--fmnist-train": "5000",
        "--fmnist-pool": "4000",
        "--fmnist-epochs": "2",
        "--fmnist-samples": "20",
        "--repeats": "200",
        "--out": "benchmarks/coverage.md",
    },
    "fashion-nodes": {
        "--out": "benchmarks/fashion_nodes",
        "--n-train": "10000",
        "--n-val": "2000",
        "--n-test": "2000",
        "--epochs": "3",
        "--pretrained-epochs": "1",
        "--batch-size": "64",
        "--components": "4",
        "--samples": "20",
        "--seed": "0",
    },
    "images": {
        "--preset": "quick",
        "--store": "benchmarks/images/results.db",
        "--out": "benchmarks/images.md",
        "--checkpoints": "benchmarks/images/nets",
        "--seeds": "0",
        "--epochs": "0",
        "--patience": "0",
        "--members": "0",
        "--samples": "0",
        "--n-val": "5000",
        "--n-train": "0",
        "--n-test": "0",
        "--n-ood": "0",
        "--n-corrupt": "0",
        "--workers": "1",
    },
    "mcbn-collapse": {
        "--out": "benchmarks/mcbn_collapse",
        "--n-train": "10000",
        "--n-val": "1000",
        "--n-test": "1000",
        "--epochs": "3",
        "--batch-size": "32",
        "--samples": "16",
        "--seed": "0",
        "--bundle": "/tmp/bayesify_bn_lenet",
        "--retrain": "retrain",
    },
    "noise-toy": {
        "--store": "benchmarks/noise_toy/results.db",
        "--out": "benchmarks/noise_toy",
        "--methods": "mc-dropout,ensemble",
        "--likelihoods": "homoscedastic,heteroscedastic",
        "--splits": "3",
        "--n-train": "500",
        "--epochs": "60",
        "--samples": "50",
        "--workers": "1",
    },
    "toy-depth": {
        "--out": "benchmarks/toy_depth",
        "--max-depth": "5",
        "--width": "256",
        "--epochs": "1500",
        "--lr": "0.01",
        "--components": "2",
        "--samples": "100",
        "--seed": "0",
    },
    "speed": {
        "--methods": "MCBN,MCDropout,BayesByBackprop,IBNN,StochasticNorm,DeepEnsemble",
        "--models": "mlp,lenet,resnet",
        "--n": "1,64,1024",
        "--t": "10,100",
        "--repeats": "5",
        "--warmup": "1",
        "--bank-batch": "32",
        "--predict": "predict",
        "--memory": "memory",
        "--train": "train",
        "--train-models": "mlp,lenet",
        "--train-batch-size": "32",
        "--train-rows": "640",
        "--max-cell-rows": "20000",
        "--device": "cpu",
        "--threads": "1",
        "--out": "benchmarks/speed.md",
    },
    "uci": {
        "--protocol": "gal",
        "--preset": "quick",
        "--methods": "all",
        "--datasets": "preset",
        "--splits": "-1",
        "--likelihoods": "default",
        "--epochs": "0",
        "--noise-protocol": "teye",
        "--cv-samples": "-1",
        "--samples": "0",
        "--test-seeds": "0",
        "--store": "benchmarks/uci/results.db",
        "--out": "benchmarks/uci.md",
        "--workers": "0",
        "--sampler": "grid",
        "--trials": "0",
        "--prune": "no-prune",
        "--trial-workers": "1",
        "--report-only": "no-report-only",
    },
}


def _plain(text: str) -> str:
    """Help text without rich's box drawing and line wrapping: words separated by one space."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def _defaults(help_text: str) -> dict[str, str]:
    """``--option -> default`` from a command's ``--help`` (long defaults may wrap); an option
    whose default is empty shows none and is left out."""
    out = {}
    pattern = r"(--[a-z][a-z-]*) (?:(?! --[a-z]).)*?\[default: ([^\]]*)\]"
    for m in re.finditer(pattern, _plain(help_text)):
        out[m.group(1)] = m.group(2).replace(" ", "")
    return out


def test_bench_help_lists_every_command():
    result = runner.invoke(app, ["bench", "--help"])
    assert result.exit_code == 0, result.output
    for name in COMMANDS:
        assert re.search(rf"│ {re.escape(name)} ", result.output), name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_help_shows_options_with_defaults(name):
    result = runner.invoke(app, ["bench", name, "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert _defaults(result.output) == COMMANDS[name]
    text = _plain(result.output)
    assert "Show this message and exit" in text
    # every option has its own help text besides the default
    for option in COMMANDS[name]:
        assert re.search(rf"{option}(?: --no-[a-z-]+)? \S+ \w", text), option


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_unknown_option_exits_nonzero(name):
    result = runner.invoke(app, ["bench", name, "--no-such-option", "1"])
    assert result.exit_code == 2
    assert "No such option" in _plain(result.output)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bn-noise", "--batch-sizes", "8,x"], "comma-separated int"),
        (["coverage", "--methods", "bbb"], "unknown methods ['bbb']"),
        (["coverage", "--level", "1.5"], "level must be strictly between 0 and 1"),
        (["images", "--methods", "mcbn,nope"], "unknown methods ['nope']"),
        (["images", "--preset", "huge"], "unknown preset ['huge']; valid: quick, paper"),
        (["uci", "--datasets", "concrete,nope"], "unknown datasets ['nope']"),
        (["speed", "--models", "mlp,vgg"], "unknown models ['vgg']"),
        (["speed", "--t", "0,10"], "t needs values >= 1"),
        (["speed", "--device", "tpu"], "device must be cpu or cuda"),
        (["uci", "--protocol", "teye", "--splits", "7"], "protocol has 5 splits, got 7"),
        (["uci", "--protocol", "teye", "--methods", "bbb"], "unknown methods ['bbb']"),
        (["bn-noise", "--bundle", "/nonexistent/bundle"], "no bundle folder"),
    ],
)
def test_bad_list_and_bad_choice_are_usage_errors(args, message):
    result = runner.invoke(app, ["bench", *args])
    assert result.exit_code == 2 and message in _plain(result.output)


def test_a_repeated_list_option_adds_to_the_list_instead_of_replacing_it(tmp_path):
    a, b, c = (str(tmp_path / f"{n}.jsonl") for n in "abc")
    result = runner.invoke(app, ["bench", "uci", "--seed-from", a, "--seed-from", f"{b},{c}",
                                 "--report-only", "--out", str(tmp_path / "p.md")])  # fmt: skip
    assert result.exit_code == 2
    # spaces ignored: rich wraps a long path inside a word (longer tmp paths under pytest-xdist)
    said = "".join(_plain(result.output).split())
    assert "".join(f"no rows to import at {a}, {b}, {c}".split()) in said


def test_missing_data_is_a_one_line_error(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()  # a data folder without the dataset
    monkeypatch.setenv("BAYESIFY_DATA", str(tmp_path / "data"))
    result = runner.invoke(app, ["bench", "uci", "--datasets", "concrete", "--splits", "1",
                                 "--out", str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "error:" in result.output and "concrete" in result.output


@dataclass(frozen=True)
class TinyOptions:
    """A stand-in benchmark's options."""

    command: ClassVar[str] = "tiny"
    n_train: int = field(default=100, metadata={"help": "Rows."})
    lr: float = field(default=1e-3, metadata={"help": "Step size."})
    sizes: tuple[int, ...] = field(default=(8, 16), metadata={"help": "Batch sizes."})
    scales: tuple[float, ...] = field(default=(0.5,), metadata={"help": "Scales."})
    names: tuple[str, ...] = field(default=("a", "b"), metadata={"help": "Names."})
    out: str = field(default="out/tiny", metadata={"help": "Folder."})
    plot: bool = field(default=True, metadata={"help": "Draw a figure."})


@pytest.fixture
def tiny():
    """A Typer app with the tiny command; ``received`` collects the options ``run`` gets."""
    received: list[TinyOptions] = []

    def run(options: TinyOptions) -> str:
        received.append(options)
        return f"# report for {options.n_train}"

    tiny_app = typer.Typer()
    add_bench_command(tiny_app, TinyOptions, run)

    @tiny_app.callback()
    def _group() -> None:  # keeps `tiny` a sub-command, as under `bayesify bench`
        pass

    return tiny_app, received


def test_adapter_defaults(tiny):
    tiny_app, received = tiny
    result = runner.invoke(tiny_app, ["tiny"])
    assert result.exit_code == 0, result.output
    assert received == [TinyOptions()]
    assert "# report for 100" in result.output


def test_adapter_maps_ints_floats_lists_strings_bools(tiny):
    tiny_app, received = tiny
    args = ["tiny", "--n-train", "7", "--lr", "0.25", "--sizes", "1, 2,3", "--scales", "1e-2,2",
            "--names", "x", "--out", "/tmp/o", "--no-plot"]  # fmt: skip
    result = runner.invoke(tiny_app, args)
    assert result.exit_code == 0, result.output
    (options,) = received
    assert options == TinyOptions(n_train=7, lr=0.25, sizes=(1, 2, 3), scales=(0.01, 2.0),
                                  names=("x",), out="/tmp/o", plot=False)  # fmt: skip
    assert isinstance(options.n_train, int) and isinstance(options.lr, float)
    assert all(isinstance(v, int) for v in options.sizes)
    assert all(isinstance(v, float) for v in options.scales)


def test_adapter_rejects_bad_values(tiny):
    tiny_app, received = tiny
    for args in (["--n-train", "1.5"], ["--sizes", "8,a"], ["--scales", "x"], ["--bogus"]):
        result = runner.invoke(tiny_app, ["tiny", *args])
        assert result.exit_code != 0, args
    assert received == []


def test_command_line_names_only_changed_options():
    assert command_line(TinyOptions()) == "bayesify bench tiny"
    options = TinyOptions(n_train=7, sizes=(1, 2), plot=False, out="a b")
    assert command_line(options) == (
        "bayesify bench tiny --n-train 7 --sizes 1,2 --out 'a b' --no-plot"
    )


def test_toy_depth_smoke(tmp_path):
    """The one benchmark small enough to run here: a depth-1 and depth-2 net, a few steps."""
    out = tmp_path / "toy"
    args = ["bench", "toy-depth", "--out", str(out), "--max-depth", "2", "--width", "8",
            "--epochs", "3", "--samples", "4"]  # fmt: skip
    threads = torch.get_num_threads()
    try:
        result = runner.invoke(app, args)
    finally:
        torch.set_num_threads(threads)  # the benchmark sets 1 thread for itself
    assert result.exit_code == 0, result.output
    text = (out / "README.md").read_text()
    assert text in result.output
    assert f"Command: `bayesify bench toy-depth --out {out} --max-depth 2 --width 8" in text
    assert "| 1 |" in text and "| 2 |" in text
    assert (out / "toy_depth.png").is_file()
