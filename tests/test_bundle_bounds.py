"""Bundles bounded by what they are: every tensor the config implies (buffers included) is
checked against the weights file's header, and the build's layers, parameters and buffer
numbers against limits, before anything real is allocated; each refusal is one line through
Python, ``bayesify predict``/``calibrate``/``serve`` and the server's repository load."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from typer.testing import CliRunner

import bayesify
from bayesify.bench.process import start_server
from bayesify.cli import app
from bayesify.io import BundleError
from bayesify.models import mlp, resnet

WIDTH = 6000  # a KFAC factor [WIDTH, WIDTH] of float64 is 288 MB
LIMITS = ("BAYESIFY_MAX_LAYERS", "BAYESIFY_MAX_PARAMETERS", "BAYESIFY_MAX_BUFFER_NUMBERS")


@pytest.fixture(autouse=True)
def _default_limits(monkeypatch):
    for var in LIMITS:
        monkeypatch.delenv(var, raising=False)


def _data(n=64, d=5):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g)
    return x, x[:, 0] - 0.5 * x[:, 1] + 0.1 * torch.randn(n, generator=g)


def _laplace(path):
    """A real last-layer KFAC Laplace bundle of Linear(5, 8) -> ReLU -> Linear(8, 1)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 1))
    return bayesify.Laplace.from_pretrained(net, _data(), subset="last-layer").save(path)


def _edit(bundle, change):
    cfg = json.loads((bundle / "config.json").read_text())
    change(cfg)
    (bundle / "config.json").write_text(json.dumps(cfg))
    return bundle


def _widened(bundle, width=WIDTH):
    """``bundle`` claiming a hidden layer of ``width``: its parameters (and posterior mean) have
    the new shapes, its posterior factors the old ones (``2.posterior.q_in`` stays [8, 8])."""
    layers = json.loads((bundle / "config.json").read_text())["model"]["kwargs"]["layers"]
    layers[0]["kwargs"]["out_features"] = layers[2]["kwargs"]["in_features"] = width
    _edit(bundle, lambda c: c["model"]["kwargs"].update(layers=layers))
    shapes = {"0.weight": (width, 5), "0.bias": (width,), "2.weight": (1, width),
              "2.posterior.mean_weight": (1, width)}  # fmt: skip
    tensors = load_file(bundle / "weights.safetensors")
    save_file({k: torch.zeros(shapes[k]) if k in shapes else v for k, v in tensors.items()},
              bundle / "weights.safetensors")  # fmt: skip
    return bundle


_PROBE = """
import json, sys, time
import bayesify
from bayesify.io import BundleError
start = time.process_time()  # CPU seconds: what the load costs, not how busy the machine is
try:
    bayesify.load(sys.argv[1])
    said = "loaded"
except BundleError as e:
    said = str(e)
seconds = time.process_time() - start
with open("/proc/self/status") as status:  # this process's own peak (ru_maxrss holds the parent's)
    peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(json.dumps([said, peak, seconds]))
"""


def _load_apart(bundle):
    """``bayesify.load(bundle)`` in a new process: what it said, its peak RSS (KiB), CPU
    seconds."""
    out = subprocess.run([sys.executable, "-c", _PROBE, str(bundle)], capture_output=True,
                         text=True, timeout=300, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def small_peak(tmp_path_factory) -> int:
    """The peak RSS (KiB) of a process that loads the small :func:`_laplace` bundle: the
    baseline each refusal's peak is compared with (one process for the module)."""
    said, peak, _ = _load_apart(_laplace(tmp_path_factory.mktemp("small") / "small"))
    assert said == "loaded"
    return peak


def test_a_posterior_factor_of_another_shape_is_refused_naming_it(tmp_path):
    bundle = _widened(_laplace(tmp_path / "b"))
    with pytest.raises(BundleError) as info:
        bayesify.load(bundle)
    said = str(info.value)
    assert "'2.posterior.q_in' has shape [8, 8] in the weights file" in said, said
    assert f"needs [{WIDTH}, {WIDTH}]" in said and "\n" not in said, said


def test_refusing_a_widened_laplace_bundle_costs_no_more_memory_than_a_small_load(
    tmp_path, small_peak
):
    crafted = _widened(_laplace(tmp_path / "crafted"))
    assert (crafted / "weights.safetensors").stat().st_size < 300_000
    said, peak, _ = _load_apart(crafted)
    assert "'2.posterior.q_in' has shape [8, 8]" in said, said
    # the factor alone would be 288 MB: the refusal peaks within 100 MB of the small load
    assert peak - small_peak < 100 * 1024, (peak, small_peak)


def _deep_mlp(cfg):
    cfg["model"] = {
        "factory": "mlp",
        "kwargs": {"in_features": 5, "out_features": 1, "hidden": [1] * 100_000},
    }


def _long_sequential(cfg):
    layer = {"name": "0", "type": "Linear", "kwargs": {"in_features": 1, "out_features": 1}}
    cfg["model"]["kwargs"]["layers"] = [{**layer, "name": str(i)} for i in range(100_000)]


@pytest.mark.parametrize("change", [_deep_mlp, _long_sequential], ids=["mlp", "sequential"])
def test_100000_layers_are_refused_fast_and_small(tmp_path, change, small_peak):
    said, peak, seconds = _load_apart(_edit(_laplace(tmp_path / "deep"), change))
    assert "more than the limit of 1,000 layers" in said, said
    assert "BAYESIFY_MAX_LAYERS=<number>" in said and "\n" not in said, said
    assert seconds < 10, seconds
    assert peak - small_peak < 150 * 1024, (peak, small_peak)


def test_an_ensemble_of_100000_members_is_refused_before_they_are_copied(tmp_path):
    m = bayesify.DeepEnsemble(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)),
                              members=2)  # fmt: skip
    m.noise_variance = 0.5
    bundle = _edit(m.save(tmp_path / "e"), lambda c: c["config"].update(members=100_000))
    start = time.process_time()  # CPU seconds, whatever else runs on the machine
    with pytest.raises(BundleError, match="its 100,000 members of 2 layers make 200,000 layers"):
        bayesify.load(bundle)
    assert time.process_time() - start < 10


def test_each_limit_names_its_variable_and_is_lifted_by_it(tmp_path, monkeypatch):
    bundle = _laplace(tmp_path / "b")
    # parameters: 5*8 + 8 + 8*1 + 1; buffers: the posterior's mean 8 + 1, prior precision and
    # scale 1 + 1, KFAC factors q_out 1 + l_out 1 + q_in 8*8 + l_in 8
    for var, said in [("BAYESIFY_MAX_PARAMETERS", "holds 57 parameters"),
                      ("BAYESIFY_MAX_BUFFER_NUMBERS", "holds 85 numbers in buffers"),
                      ("BAYESIFY_MAX_LAYERS", "lists 3 layers")]:  # fmt: skip
        monkeypatch.setenv(var, "2")
        with pytest.raises(BundleError, match=f"{said}, more than the limit of 2 .*{var}="):
            bayesify.load(bundle)
        monkeypatch.setenv(var, "1000")
        bayesify.load(bundle)
        monkeypatch.delenv(var)
    monkeypatch.setenv("BAYESIFY_MAX_LAYERS", "many")
    with pytest.raises(BundleError, match="BAYESIFY_MAX_LAYERS must be a positive whole num"):
        bayesify.load(bundle)


def test_a_real_network_over_the_layer_limit_loads_once_it_is_raised(tmp_path, monkeypatch):
    torch.manual_seed(0)
    m = bayesify.Deterministic(mlp(2, 1, (3,) * 500))  # 500 Linear + 500 BatchNorm1d + 1
    m.noise_variance = 0.5
    bundle = m.save(tmp_path / "deep")
    with pytest.raises(BundleError, match="1,001 layers, more than the limit of 1,000 layers"):
        bayesify.load(bundle)
    monkeypatch.setenv("BAYESIFY_MAX_LAYERS", "2000")
    x = torch.randn(4, 2)
    torch.testing.assert_close(bayesify.load(bundle).predict(x, samples=2).samples,
                               m.predict(x, samples=2).samples)  # fmt: skip


def test_resnet_and_ensemble_bundles_load_under_the_default_limits(tmp_path):
    x = torch.randn(16, 1, 8, 8)
    y = torch.randint(0, 10, (16,))
    torch.manual_seed(0)
    ens = bayesify.DeepEnsemble(resnet(1, 10, depth=20, width=4), members=5,
                                task="classification")  # fmt: skip
    ens.noise_variance = 1.0
    mcbn = bayesify.MCBN.from_pretrained(resnet(1, 10, depth=8, width=4).eval(), (x, y),
                                         task="classification", batch_size=4)  # fmt: skip
    for m, name in [(ens, "ensemble"), (mcbn, "mcbn")]:
        back = bayesify.load(m.save(tmp_path / name))
        torch.testing.assert_close(back.predict(x[:4], samples=3, seed=0).samples,
                                   m.predict(x[:4], samples=3, seed=0).samples)  # fmt: skip


def _one_line(result):
    said = " ".join(result.output.split())  # rich wraps the line to the terminal's width
    assert result.exit_code == 2 and said.startswith("error: "), result.output
    assert said.count("error") == 1 and "Traceback" not in said, result.output
    return said


def test_bayesify_predict_and_calibrate_say_one_line(tmp_path):
    bundle = _widened(_laplace(tmp_path / "b"))
    rows = tmp_path / "rows.csv"
    rows.write_text("x0,x1,x2,x3,x4,y\n" + "1,2,3,4,5,6\n" * 4)
    runs = [
        ["predict", str(bundle), str(rows), "--out", str(tmp_path / "p.csv")],
        ["calibrate", str(bundle), "--data", str(rows), "--target", "y", "--coverage", "0.8"],
    ]
    for args in runs:
        said = _one_line(CliRunner().invoke(app, args))
        assert "'2.posterior.q_in' has shape [8, 8]" in said, said


def _rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_the_server_refuses_the_bundle_at_start_up_and_on_a_repository_load(tmp_path):
    crafted = _widened(_laplace(tmp_path / "crafted"))
    srv = start_server(crafted, tmp_path / "alone.log", "--threads", "1", wait=False)
    try:
        assert srv.process.wait(120) == 2, srv.output()
    finally:
        srv.stop()
    said = " ".join(srv.output().split())
    assert "'2.posterior.q_in' has shape [8, 8]" in said and "Traceback" not in said, said

    root = tmp_path / "models"
    _laplace(root / "ok")
    srv = start_server(root, tmp_path / "repo.log", "--threads", "1", name=None)
    try:
        shutil.copytree(crafted, root / "big")
        before = _rss_kib(srv.process.pid)
        r = httpx.post(f"{srv.url}/v2/repository/models/big/load", json={}, timeout=120)
        assert r.status_code == 400, r.text
        assert "'2.posterior.q_in' has shape [8, 8]" in r.json()["error"], r.text
        assert _rss_kib(srv.process.pid) - before < 100 * 1024
        ready = httpx.get(f"{srv.url}/v2/models/ok/ready", timeout=10)
        assert ready.status_code == 200
    finally:
        srv.stop()


def test_a_buffer_of_another_dtype_kind_is_refused(tmp_path):
    m = bayesify.Deterministic(nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.Linear(3, 1)))
    m.noise_variance = 0.5
    bundle = m.save(tmp_path / "b")
    tensors = load_file(bundle / "weights.safetensors")
    tensors["1.num_batches_tracked"] = tensors["1.num_batches_tracked"].float()
    save_file(tensors, bundle / "weights.safetensors")
    said = r"'1.num_batches_tracked' is float32 in the weights file; the network's buffer is int"
    with pytest.raises(BundleError, match=said + r"eger \(int64\)"):
        bayesify.load(bundle)
