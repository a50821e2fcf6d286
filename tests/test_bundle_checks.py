"""Bundles are checked before they are built: the weights file's header (names, shapes, dtypes)
against the network the config describes, built on the meta device; a malformed config.json is
one BundleError line, through Python and through ``bayesify predict``."""

from __future__ import annotations

import json
import resource
import time

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from typer.testing import CliRunner

import bayesify
from bayesify.cli import app
from bayesify.io import BundleError


def _bundle(tmp_path, name="b"):
    m = bayesify.Deterministic(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)))
    m.noise_variance = 0.5
    m.input_shape = (2,)
    return m.save(tmp_path / name)


def _edit(bundle, change):
    cfg = json.loads((bundle / "config.json").read_text())
    change(cfg)
    (bundle / "config.json").write_text(json.dumps(cfg))
    return bundle


def _layers(cfg):
    return cfg["model"]["kwargs"]["layers"]


def test_a_huge_layer_beside_a_small_weights_file_is_refused_without_allocating(tmp_path):
    bundle = _edit(_bundle(tmp_path), lambda c: _layers(c)[0]["kwargs"].update(
        in_features=30000, out_features=30000))  # fmt: skip
    assert (bundle / "weights.safetensors").stat().st_size < 1000
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    start = time.process_time()  # CPU seconds, whatever else runs on the machine
    with pytest.raises(BundleError, match=r"'0.weight' has shape \[3, 2\] .* \[30000, 30000\]"):
        bayesify.load(bundle)
    assert time.process_time() - start < 1.0
    # Linear(30000, 30000) is 3.6 GB of float32: the peak grew by far less
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 200 * 1024


def test_whole_number_weights_are_refused(tmp_path):
    bundle = _bundle(tmp_path)
    tensors = load_file(bundle / "weights.safetensors")
    save_file({k: v.round().to(torch.int64) for k, v in tensors.items()},
              bundle / "weights.safetensors")  # fmt: skip
    with pytest.raises(BundleError, match=r"'0\.\w+' is int64 in the weights file; the network's"):
        bayesify.load(bundle)


def _nested(depth):
    layer = {"name": "0", "type": "Linear", "kwargs": {"in_features": 2, "out_features": 1}}
    for _ in range(depth):
        layer = {"name": "0", "type": "Sequential", "layers": [layer]}
    return [layer]


MALFORMED = {
    "no method": (lambda c: c.pop("method"), "config.json lacks 'method'"),
    "unknown method": (lambda c: c.update(method="magic"), "unknown method 'magic'"),
    "config a list": (lambda c: c.update(config=[1, 2]), "config.json is malformed"),
    "model a number": (lambda c: c.update(model=5), "config.json is malformed"),
    "unknown factory": (lambda c: c.update(model={"factory": "nope"}), "unknown model factory"),
    "layers not a list": (lambda c: c["model"]["kwargs"].update(layers=7), "is malformed"),
    "layer a string": (lambda c: c["model"]["kwargs"].update(layers=["Linear"]), "is malformed"),
    "unknown layer argument": (lambda c: _layers(c)[0]["kwargs"].update(colour="red"),
                               "unexpected keyword argument 'colour'"),
    "missing layer argument": (lambda c: _layers(c)[0]["kwargs"].pop("in_features"),
                               "config.json is malformed"),
    "layer argument a string": (lambda c: _layers(c)[0]["kwargs"].update(in_features="two"),
                                "config.json is malformed"),
    "deep nesting": (lambda c: c["model"]["kwargs"].update(layers=_nested(450)),
                     "does not fit the network"),
    "noise not a number": (lambda c: c.update(noise_variance="loud"), "config.json is malformed"),
    "no noise": (lambda c: c.pop("noise_variance"), "config.json lacks 'noise_variance'"),
    "input shape a number": (lambda c: c.update(input_shape=5), "config.json is malformed"),
    "metadata a list": (lambda c: c.update(metadata=[1]), "metadata must be a JSON object"),
    "a JSON list": (lambda c: c.clear(), "unsupported bundle format"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_config_is_one_bundle_error_line(tmp_path, case):
    change, message = MALFORMED[case]
    bundle = _edit(_bundle(tmp_path), change)
    with pytest.raises(BundleError) as info:
        bayesify.load(bundle)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_deeply_nested_json_and_bayesify_predict_say_one_line(tmp_path):
    bundle = _bundle(tmp_path)
    (bundle / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BundleError, match="nested too deeply"):
        bayesify.load(bundle)
    _edit(_bundle(tmp_path, "c"), lambda c: c.pop("method"))
    (tmp_path / "rows.csv").write_text("x0,x1\n1,2\n")
    for b in (bundle, tmp_path / "c"):
        args = ["predict", str(b), str(tmp_path / "rows.csv"), "--out", str(tmp_path / "p.csv")]
        result = CliRunner().invoke(app, args)
        said = " ".join(result.output.split())  # rich wraps the line to the terminal's width
        assert result.exit_code == 2 and said.startswith("error: "), result.output
        assert said.count("error") == 1 and "Traceback" not in said, result.output


def test_a_bundle_checked_on_the_meta_device_loads_as_before(tmp_path):
    """Every method round-trips (BBB's surgery reads its noise: not on the meta device)."""
    x, y = torch.randn(32, 2), torch.randn(32)
    for cls in (bayesify.BayesByBackprop, bayesify.MCBN, bayesify.MCDropout, bayesify.IBNN):
        net = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Dropout(0.1),
                            nn.Linear(4, 1))  # fmt: skip
        m = cls(net)
        m.fit((x, y), epochs=1, batch_size=8, progress=False)
        back = bayesify.load(m.save(tmp_path / cls.name))
        a = m.predict(x[:4], samples=3, seed=0).samples
        torch.testing.assert_close(back.predict(x[:4], samples=3, seed=0).samples, a)
