"""Monitoring a regression model from feedback, in a real server process: interval coverage,
NLL and the PIT histogram under the served mixture, checked against scipy from the samples the
server returned; an absurd outcome is flagged and leaves /metrics finite; every metric line
carries the model's name and version."""

from __future__ import annotations

import math
import re

import httpx
import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import norm

from bayesify.bench.process import start_server

from .conftest import regression_data, stop_server


@pytest.fixture(scope="module")
def reg_server(regression_bundle, tmp_path_factory):
    srv = start_server(regression_bundle, tmp_path_factory.mktemp("log") / "server.log",
                       "--threads", "1", "--samples", "16", "--batch-wait-ms", "0",
                       name="reg")  # fmt: skip
    yield srv
    stop_server(srv)


def _predict(srv, x: np.ndarray, level: float) -> list[dict]:
    body = {"inputs": x.tolist(), "level": level, "return_samples": True}
    r = httpx.post(f"{srv.url}/v1/predict", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["predictions"]


def _feedback(srv, pairs) -> dict:
    body = {"outcomes": [{"request_id": r, "outcome": float(o)} for r, o in pairs]}
    r = httpx.post(f"{srv.url}/v1/feedback", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        m = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if m and all(f'{k}="{v}"' in m.group(1) for k, v in labels.items()):
            return float(m.group(2))
    raise AssertionError(f"no {name} {labels} in /metrics")


def test_regression_coverage_nll_and_pit_are_those_of_the_served_mixture(reg_server):
    x, y = regression_data(60, 7)
    x, y = x.numpy(), y.numpy().astype(np.float64)
    preds = _predict(reg_server, x[:40], 0.9) + _predict(reg_server, x[40:], 0.5)
    levels = np.array([0.9] * 40 + [0.5] * 20)
    for start in (0, 30):  # two requests: at most 100 outcomes each, and drift needs 200
        pairs = [(p["request_id"], t) for p, t in
                 zip(preds[start:start + 30], y[start:start + 30], strict=True)]  # fmt: skip
        assert _feedback(reg_server, pairs)["accepted"] == 30

    # independently, from what the server returned: each row's mixture is its T sample means
    # with the noise variance it reported (one per row for this homoscedastic model)
    means = np.array([p["samples"] for p in preds])  # [N, T]
    noise = np.sqrt([p["aleatoric_variance"] for p in preds])[:, None]  # [N, 1]
    pit = norm.cdf(y[:, None], means, noise).mean(1)
    logp = logsumexp(norm.logpdf(y[:, None], means, noise), axis=1) - math.log(means.shape[1])
    lower = np.array([p["lower"] for p in preds])
    upper = np.array([p["upper"] for p in preds])
    covered = (lower <= y) & (y <= upper)
    mean = np.array([p["mean"] for p in preds])
    keep = ~np.array([p["defer"] for p in preds])
    assert 0 < keep.sum() < 60  # some rows deferred, some accepted

    mon = httpx.get(f"{reg_server.url}/v1/status").json()["monitor"]
    assert mon["all"]["n"] == 60 and mon["accepted"]["n"] == keep.sum()
    assert mon["all"]["nll"] == pytest.approx(-logp.mean(), rel=1e-5)
    assert mon["accepted"]["nll"] == pytest.approx(-logp[keep].mean(), rel=1e-5)
    assert mon["all"]["error"] == pytest.approx(np.sqrt(((mean - y) ** 2).mean()), rel=1e-6)
    assert mon["all"]["interval_coverage"] == pytest.approx(covered.mean())
    assert mon["all"]["interval_level"] == pytest.approx(levels.mean())
    assert mon["accepted"]["interval_coverage"] == pytest.approx(covered[keep].mean())
    counts = np.histogram(pit, bins=10, range=(0, 1))[0]
    assert mon["pit"]["counts"] == counts.tolist()
    # the interval is the served predictive's own: its ends are the mixture's quantiles
    q = norm.cdf(lower[:, None], means, noise).mean(1)
    assert q == pytest.approx((1 - levels) / 2, abs=1e-4)

    # the same figures in /metrics, each beside its baseline
    text = httpx.get(f"{reg_server.url}/metrics").text
    for fig in ("nll", "error", "interval_coverage"):
        got = _metric(text, "bayesify_rolling", figure=fig, part="all", model="reg")
        assert got == pytest.approx(mon["all"][fig], rel=1e-9)
    validation = httpx.get(f"{reg_server.url}/v1/model").json()["deferral"]["validation"]
    assert _metric(text, "bayesify_validation", figure="nll", part="all") == pytest.approx(
        validation["nll_all"]
    )
    assert _metric(text, "bayesify_validation", figure="interval_coverage",
                   part="all") == pytest.approx(levels.mean())  # fmt: skip
    assert _metric(text, "bayesify_drifting", figure="nll", part="all") == 0.0  # 60 < 200 rows


def test_an_absurd_outcome_is_flagged_and_metrics_stay_finite(reg_server):
    x, y = regression_data(3, 8)
    preds = _predict(reg_server, x.numpy(), 0.9)
    ids = [p["request_id"] for p in preds]
    answer = _feedback(reg_server, [(ids[0], 1e300), (ids[1], -1e300), (ids[2], float(y[2]))])
    assert answer["accepted"] == 1
    assert [f["request_id"] for f in answer["flagged"]] == ids[:2]
    low, high = httpx.get(f"{reg_server.url}/v1/model").json()["metadata"]["target_range"]
    assert f"training targets' range {low:.6g} .. {high:.6g}" in answer["flagged"][0]["reason"]
    again = _feedback(reg_server, [(ids[0], 100.0)])  # a flagged row was received
    assert again["already_received"] == [ids[0]] and again["accepted"] == 0
    text = httpx.get(f"{reg_server.url}/metrics").text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line and not line.startswith("#")]  # fmt: skip
    assert all(math.isfinite(v) for v in values)
    assert _metric(text, "bayesify_feedback_rows_total", status="flagged") == 2
    mon = httpx.get(f"{reg_server.url}/v1/status").json()["monitor"]
    assert mon["feedback"]["flagged"] == 2
    assert math.isfinite(mon["all"]["error"]) and math.isfinite(mon["all"]["nll"])


def test_every_metric_line_carries_model_and_version(reg_server):
    _predict(reg_server, regression_data(2, 9)[0].numpy(), 0.9)
    httpx.get(f"{reg_server.url}/v2/models/reg")
    httpx.post(f"{reg_server.url}/v1/predict", json={"inputs": []})  # a 422 is counted too
    lines = [line for line in httpx.get(f"{reg_server.url}/metrics").text.splitlines()
             if line and not line.startswith("#")]  # fmt: skip
    names = {line.split("{")[0].split(" ")[0] for line in lines}
    assert {"bayesify_requests_total", "bayesify_request_errors_total", "bayesify_rows_total",
            "bayesify_rolling", "bayesify_validation"} <= names  # fmt: skip
    for line in lines:
        assert re.search(r'\{(.*,)?model="reg",(.*,)?version="1"(,.*)?\} ', line), line
