"""The status page in a real headless browser (Debian's chromium driven by Playwright): it
loads, shows the model card and the figures, and updates after new requests; on a server with
an API key it asks for the key, and shows a regression model's PIT chart and drift against the
baselines once the key is given."""

from __future__ import annotations

import shutil

import httpx
import pytest

from bayesify.bench.process import start_server

from .conftest import API_KEY, regression_data, stop_server, toy_data

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no chromium browser installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def test_status_page_shows_figures_and_updates(server, browser):
    page = browser.new_page()
    page.goto(server.url + "/")
    page.wait_for_function("document.getElementById('name').textContent === 'toy'")
    assert "mc-dropout" in page.inner_text("#card")
    assert "defer when mi >" in page.inner_text("#policy")
    before = int(page.get_attribute("body", "data-served") or 0)
    x, y = toy_data(30, 9)
    preds = httpx.post(f"{server.url}/v1/predict", json={"inputs": x.tolist()}).json()
    outcomes = [{"request_id": p["request_id"], "outcome": int(t)}
                for p, t in zip(preds["predictions"], y, strict=True)]  # fmt: skip
    httpx.post(f"{server.url}/v1/feedback", json={"outcomes": outcomes})
    page.wait_for_function(
        f"Number(document.body.dataset.served) >= {before + 30} && "
        "Number(document.querySelector('#cal-all td:nth-child(2)').textContent) >= 30",
        timeout=20_000,
    )
    status = httpx.get(f"{server.url}/v1/status").json()["monitor"]
    assert page.inner_text("#served") == str(status["served"])
    assert page.inner_text("#p50").endswith("ms")
    rate = page.inner_text("#deferral-rate")
    assert rate.endswith("%") and abs(float(rate[:-1]) - 100 * status["deferral_rate"]) < 0.1
    acc = page.inner_text("#cal-all").split()
    assert acc[0] == "all" and int(acc[1]) == status["all"]["n"]
    assert float(acc[2]) == pytest.approx(status["all"]["accuracy"], abs=1e-4)
    assert page.locator("#bars rect").count() >= 1  # the reliability plot has bars
    page.close()


@pytest.fixture(scope="module")
def keyed_server(regression_bundle, tmp_path_factory):
    srv = start_server(regression_bundle, tmp_path_factory.mktemp("log") / "server.log",
                       "--threads", "1", "--samples", "16", name="reg",
                       env={"BAYESIFY_API_KEY": API_KEY})  # fmt: skip
    yield srv
    stop_server(srv)


def test_status_page_asks_for_the_api_key_then_shows_regression_figures(keyed_server, browser):
    url, key = keyed_server.url, {"X-API-Key": API_KEY}
    page = browser.new_page()
    page.goto(url + "/")
    page.wait_for_selector("#key-form", state="visible")
    assert page.is_hidden("#figures")  # no figures, and no claim about the policy
    page.fill("#key-input", "wrong-key")
    page.click("#key-form button")
    page.wait_for_function("document.getElementById('key-error').textContent.includes('refused')")

    page.fill("#key-input", API_KEY)
    page.click("#key-form button")
    page.wait_for_function("document.getElementById('name').textContent === 'reg'")
    assert page.is_hidden("#key-form") and page.is_visible("#figures")
    assert "defer when std >" in page.inner_text("#policy")
    x, y = regression_data(20, 5)
    preds = httpx.post(f"{url}/v1/predict", json={"inputs": x.tolist()}, headers=key).json()
    outcomes = [{"request_id": p["request_id"], "outcome": float(t)}
                for p, t in zip(preds["predictions"], y, strict=True)]  # fmt: skip
    r = httpx.post(f"{url}/v1/feedback", json={"outcomes": outcomes}, headers=key)
    assert r.json()["accepted"] == 20
    page.wait_for_function("document.querySelectorAll('#bars rect').length === 10",
                           timeout=20_000)  # the PIT histogram's bars  # fmt: skip
    assert "Probability integral transform" in page.inner_text("#chart-title")
    status = httpx.get(f"{url}/v1/status", headers=key).json()["monitor"]
    cells = page.inner_text("#drift-interval_coverage-all").split()
    assert cells[:3] == ["interval_coverage", "all", "20"]
    assert float(cells[3]) == pytest.approx(status["all"]["interval_coverage"], abs=1e-4)
    assert cells[4] == "0.9000"  # the nominal level beside the live coverage
    cells = page.inner_text("#drift-nll-all").split()
    assert float(cells[3]) == pytest.approx(status["all"]["nll"], abs=1e-4)
    validation = status["validation"]["nll_all"]
    assert float(cells[4]) == pytest.approx(validation, abs=1e-4)
    # the key is kept for the tab: a reload shows the figures without asking again
    page.reload()
    page.wait_for_function("document.getElementById('name').textContent === 'reg'")
    assert page.is_hidden("#key-form")
    page.close()
