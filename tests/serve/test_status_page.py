"""The status page in a real headless browser (Debian's chromium driven by Playwright): it
loads, shows the model card and the figures, and updates after new requests."""

from __future__ import annotations

import shutil

import httpx
import pytest

from .conftest import toy_data

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
