"""The status page in a real headless browser (Debian's chromium driven by Playwright): it
loads, shows the model card and the figures, and updates after new requests; on a server with
an API key it asks for the key, and shows a regression model's PIT chart and drift against the
baselines once the key is given. On a folder of models with traffic and feedback: every chart's
ticks are numbers placed where their values are, bins are labelled and shaded by their rows, a
model without a deferral policy shows "–", an unavailable model shows why on click, no raw JSON
or float noise is visible, and the time series draw one point per history snapshot.

``BAYESIFY_STATUS_SCREENSHOTS=docs/images/status`` writes the screenshots the docs show."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import httpx
import pytest

from bayesify.bench.process import start_server

from .conftest import API_KEY, feedback_round, regression_data, stop_server, toy_data

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CLOCK = re.compile(r"^\d\d:\d\d:\d\d$")
NOISE = re.compile(r"\d{10,}|\d\.\d{9,}")  # 10+ digits in a row: a float printed raw
SHOTS = os.environ.get("BAYESIFY_STATUS_SCREENSHOTS")


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no chromium browser installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A page of the browser's; fails the test on any script error in it."""
    page = browser.new_page(viewport={"width": 1240, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    page.close()
    assert not errors, f"script errors on the page: {errors}"


def cells(page, selector: str) -> list[str]:
    return page.locator(f"{selector} td").all_inner_texts()


def number(text: str) -> float:
    """A number as the page writes it: thousands separators, a trailing % or unit."""
    return float(text.replace(",", "").removesuffix("%").removesuffix("ms").strip())


def test_status_page_shows_figures_and_updates(server, page):
    page.goto(server.url + "/")
    page.wait_for_function("document.getElementById('name').textContent === 'toy'")
    assert "mc-dropout" in page.inner_text("#card")
    policy = page.inner_text("#policy")
    assert "when its MI >" in policy and "coverage 80 %" in policy and "{" not in policy
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
    assert number(page.inner_text("#served")) == status["served"]
    assert page.inner_text("#p50").endswith("ms")
    rate = page.inner_text("#deferral-rate")
    assert rate.endswith("%") and number(rate) == pytest.approx(100 * status["deferral_rate"],
                                                                rel=5e-3)  # fmt: skip
    row = cells(page, "#cal-all")
    assert row[0] == "all" and number(row[1]) == status["all"]["n"]
    assert number(row[2]) == pytest.approx(100 * status["all"]["accuracy"], rel=5e-3)  # 3 s.f.
    assert page.locator("#chart rect.bar").count() >= 1  # the reliability plot has bars


@pytest.fixture(scope="module")
def keyed_server(regression_bundle, tmp_path_factory):
    srv = start_server(regression_bundle, tmp_path_factory.mktemp("log") / "server.log",
                       "--threads", "1", "--samples", "16", name="reg",
                       env={"BAYESIFY_API_KEY": API_KEY})  # fmt: skip
    yield srv
    stop_server(srv)


def test_status_page_asks_for_the_api_key_then_shows_regression_figures(keyed_server, page):
    url, key = keyed_server.url, {"X-API-Key": API_KEY}
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
    assert "when its STD >" in page.inner_text("#policy")
    x, y = regression_data(20, 5)
    preds = httpx.post(f"{url}/v1/predict", json={"inputs": x.tolist()}, headers=key).json()
    outcomes = [{"request_id": p["request_id"], "outcome": float(t)}
                for p, t in zip(preds["predictions"], y, strict=True)]  # fmt: skip
    r = httpx.post(f"{url}/v1/feedback", json={"outcomes": outcomes}, headers=key)
    assert r.json()["accepted"] == 20
    page.wait_for_function("document.querySelectorAll('#chart rect.bar').length >= 5",
                           timeout=20_000)  # the PIT histogram's bars  # fmt: skip
    assert "PIT histogram" in page.text_content("#chart .title")
    status = httpx.get(f"{url}/v1/status", headers=key).json()["monitor"]
    row = cells(page, "#drift-interval_coverage-all")
    assert row[:3] == ["interval coverage", "all", "20"]
    assert number(row[3]) == pytest.approx(100 * status["all"]["interval_coverage"], rel=5e-3)
    assert row[4] == "90 %"  # the nominal level beside the live coverage, without float noise
    row = cells(page, "#drift-nll-all")
    assert number(row[3]) == pytest.approx(status["all"]["nll"], rel=5e-3)
    assert number(row[4]) == pytest.approx(status["validation"]["nll_all"], rel=5e-3)
    # the key is kept for the tab: a reload shows the figures without asking again
    page.reload()
    page.wait_for_function("document.getElementById('name').textContent === 'reg'")
    assert page.is_hidden("#key-form")


# ---------------------------------------------------------------------- a folder of models
REASON = "not a plain integer"  # why broken/draft is not served (folders.py's words)
ROUNDS = 8
SHIFTED = 3  # toy's last rounds: shifted labels


@pytest.fixture(scope="module")
def folder_server(toy_bundle, regression_bundle, tmp_path_factory):
    """toy (a deferral policy), plain (the same bundle without one), reg (regression) and
    broken (a bundle in a folder not named as a version: unavailable), each version served
    rows in rounds with their outcomes sent back (toy's last ``SHIFTED`` rounds: labels moved
    by one class, so its error drifts)."""
    root = tmp_path_factory.mktemp("models")
    shutil.copytree(toy_bundle, root / "toy" / "1")
    shutil.copytree(regression_bundle, root / "reg" / "1")
    plain = shutil.copytree(toy_bundle, root / "plain" / "1")
    config = json.loads((plain / "config.json").read_text())
    del config["metadata"]["deferral"]
    (plain / "config.json").write_text(json.dumps(config))
    shutil.copytree(toy_bundle, root / "broken" / "draft")
    srv = start_server(root, tmp_path_factory.mktemp("log") / "server.log", "--threads", "1",
                       "--samples", "16", name=None)  # fmt: skip
    for i in range(ROUNDS):
        for name, data, cast in (("toy", toy_data, int), ("plain", toy_data, int),
                                 ("reg", regression_data, float)):  # fmt: skip
            x, y = data(40, 100 + i)
            preds = httpx.post(f"{srv.url}/v1/predict", json={"inputs": x.tolist(),
                                                              "model": name}).json()  # fmt: skip
            if name == "toy" and i >= ROUNDS - SHIFTED:
                y = (y + 1) % 3  # outcomes unlike those the model learnt: its error drifts
            outcomes = [{"request_id": p["request_id"], "outcome": cast(t)}
                        for p, t in zip(preds["predictions"], y, strict=True)]  # fmt: skip
            r = httpx.post(f"{srv.url}/v1/feedback", json={"outcomes": outcomes, "model": name})
            assert r.json()["accepted"] == 40
        time.sleep(0.8)  # snapshots spread over time
    yield srv
    stop_server(srv)


def status_of(url: str, name: str) -> dict:
    return httpx.get(f"{url}/v1/status", params={"name": name, "version": 1}).json()


def show(page, url: str, name: str) -> dict:
    """Open the page, click ``name`` in the models table, wait for its figures; its status."""
    page.goto(url + "/")
    page.wait_for_selector("#models tr.model")
    page.click(f"#models tr[data-name={name}]")
    page.wait_for_function(f"document.getElementById('name').textContent === '{name}' && "
                           "document.querySelectorAll('#chart text.tick').length > 0")  # fmt: skip
    return status_of(url, name)


def ticks(page, svg: str, axis: str) -> list[tuple[str, float]]:
    """The tick labels of one axis of a chart, with their position (x, or y of the baseline)."""
    coord = "x" if axis == "x" else "y"
    return page.eval_on_selector_all(
        f"{svg} text.tick.{axis}",
        f"els => els.map(e => [e.textContent, Number(e.getAttribute('{coord}'))])",
    )


def y_of(page, svg: str, value: float) -> float:
    """Where ``value`` lies on a chart's y axis, read off its first and last tick labels."""
    t = ticks(page, svg, "y")
    (a, ya), (b, yb) = (number(t[0][0]), t[0][1]), (number(t[-1][0]), t[-1][1])
    return ya + (value - a) * (yb - ya) / (b - a) - 3.5  # labels sit 3.5 px below their line


def visible_text_is_clean(page) -> None:
    text = page.inner_text("body")
    assert "{" not in text and "}" not in text, "raw JSON on the page"
    assert not NOISE.search(text), f"float noise on the page: {NOISE.search(text).group()}"


def test_reliability_chart_has_axes_and_bins_labelled_by_rows(folder_server, page):
    status = show(page, folder_server.url, "toy")
    curve = status["monitor"]["reliability"]
    xt, yt = ticks(page, "#chart", "x"), ticks(page, "#chart", "y")
    assert [number(t) for t, _ in xt] == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert [number(t) for t, _ in yt] == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert "confidence" in page.text_content("#chart") and "accuracy" in page.text_content("#chart")
    labels = page.locator("#chart text.count").all_text_contents()
    assert [int(number(c)) for c in labels] == curve["counts"]  # every bin's rows, written
    bars = page.eval_on_selector_all("#chart rect.bar", "els => els.map(e => [Number(e.dataset"
                                     ".count), Number(e.getAttribute('fill-opacity')), "
                                     "Number(e.getAttribute('y'))])")  # fmt: skip
    most = max(curve["counts"])
    filled = [(c, a) for c, a in zip(curve["counts"], curve["accuracy"], strict=True) if c]
    assert [b[0] for b in bars] == [c for c, _ in filled]
    for (c, acc), (_, opacity, top) in zip(filled, bars, strict=True):
        assert opacity == pytest.approx(0.2 + 0.8 * c / most, abs=1e-3)  # shaded by rows
        assert top == pytest.approx(y_of(page, "#chart", acc), abs=0.5)  # height = accuracy
    visible_text_is_clean(page)
    if SHOTS:
        page.mouse.move(0, 0)  # no row highlighted under the pointer
        page.screenshot(path=str(Path(SHOTS) / "classification.png"), full_page=True)


def test_pit_chart_counts_rows_against_the_uniform_line(folder_server, page):
    status = show(page, folder_server.url, "reg")
    counts, n = status["monitor"]["pit"]["counts"], status["monitor"]["all"]["n"]
    page.wait_for_function(f"document.querySelectorAll('#chart text.count').length === "
                           f"{len(counts)}")  # fmt: skip
    assert [int(number(c)) for c in page.locator("#chart text.count").all_text_contents()] == counts
    assert all(float(t.replace(",", "")) >= 0 for t, _ in ticks(page, "#chart", "y"))
    uniform = float(page.get_attribute("#chart line.ref:not(.swatch)", "y1"))
    assert uniform == pytest.approx(y_of(page, "#chart", n / len(counts)), abs=0.5)
    assert "rows per bin" in page.text_content("#chart")
    row = cells(page, "#drift-interval_coverage-all")
    assert row[4] == "90 %"  # the level served, 0.9000000000000037 in the JSON
    visible_text_is_clean(page)
    if SHOTS:
        page.mouse.move(0, 0)  # no row highlighted under the pointer
        page.screenshot(path=str(Path(SHOTS) / "regression.png"), full_page=True)


def test_no_policy_shows_a_dash_and_unavailable_model_its_reason(folder_server, page):
    status = show(page, folder_server.url, "toy")
    rows = {m["name"]: m for m in status["models"]}
    assert rows["plain"]["deferral_policy"] is False and rows["toy"]["deferral_policy"] is True
    assert cells(page, "#models tr[data-name=plain]")[-1] == "–"
    toy_rate = cells(page, "#models tr[data-name=toy]")[-1]
    assert number(toy_rate) == pytest.approx(100 * rows["toy"]["deferral_rate"], rel=5e-3)
    # the unavailable model: its reason appears on click
    assert REASON in rows["broken"]["reason"]
    assert page.locator("#models tr.reason").count() == 0
    page.click("#models tr[data-name=broken]")
    page.wait_for_selector("#models tr.reason")
    assert page.inner_text("#models tr.reason") == f"Not served: {rows['broken']['reason']}"
    if SHOTS:
        page.locator("#models").screenshot(path=str(Path(SHOTS) / "models.png"))
    page.focus("#models tr[data-name=broken]")  # and from the keyboard: Enter hides it
    page.keyboard.press("Enter")
    page.wait_for_selector("#models tr.reason", state="detached")
    # the model without a policy: "–" for its deferral figures, not "0 %"
    page.click("#models tr[data-name=plain]")
    page.wait_for_function("document.getElementById('name').textContent === 'plain'")
    assert page.inner_text("#deferral-rate") == "–"
    assert page.inner_text("#policy").startswith("none")
    assert page.locator("#ts-deferral circle.pt").count() == 0
    assert "no deferral policy" in page.text_content("#ts-deferral")
    visible_text_is_clean(page)


def test_time_series_draw_one_point_per_snapshot(folder_server, page):
    status = show(page, folder_server.url, "toy")
    hist = status["history"]
    assert len(hist) >= 2
    page.wait_for_function(f"Number(document.body.dataset.snapshots) === {len(hist)}")
    shown, served, p50 = page.evaluate("""() => [Number(document.body.dataset.snapshots),
        document.querySelectorAll('#ts-rows circle.pt[data-series=served]').length,
        document.querySelectorAll('#ts-latency circle.pt[data-series=p50]').length]""")
    assert status_of(folder_server.url, "toy")["history"] == hist  # no snapshot since
    assert served == shown == len(hist)  # one point per snapshot
    assert p50 == sum(h["latency_p50_ms"] is not None for h in hist)  # and per latency known
    for svg in ("#ts-latency", "#ts-rows", "#ts-deferral", "#ts-fig0", "#ts-fig1", "#ts-fig2"):
        yt = ticks(page, svg, "y")
        assert len(yt) >= 3 and all(isinstance(number(t), float) for t, _ in yt)  # numeric
        xt = ticks(page, svg, "x")
        assert xt and all(CLOCK.match(t) for t, _ in xt)
        assert page.locator(f"{svg} .title").text_content()
        assert page.locator(f"{svg} .axis-label").count() == 2  # units on both axes
    # drift: the snapshots where toy's error was drifting are red on the accuracy chart
    marked = sum("error_all" in h["drifting"] for h in hist)
    assert marked >= 1 and "error rate (all rows)" in page.inner_text("#drift")
    assert page.locator("#ts-fig0 circle.pt.drift[data-series=accuracy-all]").count() == marked
    # the validation baseline is the dashed line at its value on the NLL chart
    base = hist[-1]["baseline"]["nll"]
    line = float(page.get_attribute("#ts-fig1 line.ref:not(.swatch)", "y1"))
    assert line == pytest.approx(y_of(page, "#ts-fig1", base), abs=0.5)
    # the last point is the rows served in all (the last snapshot came with the last feedback)
    last = page.eval_on_selector_all("#ts-rows circle.pt[data-series=served]",
                                     "els => Number(els.at(-1).getAttribute('cy'))")  # fmt: skip
    served = status["monitor"]["served"]
    assert served == ROUNDS * 40 and hist[-1]["served"] == served
    assert last == pytest.approx(y_of(page, "#ts-rows", served), abs=0.5)
    visible_text_is_clean(page)


def fixture_history(now: float, n: int = 12) -> list[dict]:
    """Snapshots in the monitor's format: NLL undefined in snapshot 3 (an empty window) and
    drifting from snapshot 8 on."""
    out = []
    for i in range(n):
        nll = None if i == 3 else 0.5 + 0.02 * i
        out.append({"time": now - 60 * (n - i), "served": 100 * i, "scored": 50 * i,
                    "deferral_rate": 0.2, "latency_p50_ms": 10.0 + i, "latency_p99_ms": 30.0,
                    "all": {"accuracy": 0.8, "error": 0.2, "nll": nll, "ece": 0.1},
                    "accepted": {"accuracy": 0.85, "error": 0.15, "nll": nll, "ece": 0.1},
                    "baseline": {"accuracy": 0.84, "error": 0.16, "nll": 0.49, "ece": 0.15},
                    "drifting": ["nll_all"] if i >= 8 else []})  # fmt: skip
    return out


def test_time_series_break_at_undefined_values_and_mark_drift(folder_server, page):
    """The drawing on a history given to the page (the real server's, with snapshots made
    up): an undefined value is no point and breaks the line; drifting snapshots are marked."""
    hist = fixture_history(time.time())

    def with_history(route):
        response = route.fetch()
        body = response.json()
        body.pop("history_after", None)  # the whole history in every answer
        body.update(history=hist, history_seq=len(hist), history_total=len(hist))
        route.fulfill(response=response, json=body)

    page.route("**/v1/status*", with_history)
    show(page, folder_server.url, "toy")
    page.wait_for_function("document.body.dataset.snapshots === '12'")
    nll = "#ts-fig1 circle.pt[data-series=nll-all]"
    assert page.locator(nll).count() == 11  # snapshot 3 has no NLL
    assert page.locator(f"{nll}.drift").count() == 4  # snapshots 8 to 11
    path = page.get_attribute("#ts-fig1 [data-series=nll-all] path", "d")
    assert path.count("M") == 2  # the line starts again after the gap
    assert page.locator("#ts-fig0 circle.pt.drift").count() == 0  # accuracy did not drift
    assert "drift" in page.locator("#ts-fig1 .legend").all_text_contents()
    tops = page.eval_on_selector_all(
        "#ts-latency circle.pt[data-series=p50]",
        "els => els.map(e => Number(e.getAttribute('cy')))",
    )
    for i, cy in enumerate(tops):
        assert cy == pytest.approx(y_of(page, "#ts-latency", 10.0 + i), abs=0.5)
    visible_text_is_clean(page)


def test_a_poll_after_the_first_reads_only_the_snapshots_since(folder_server):
    url = folder_server.url
    whole = status_of(url, "plain")
    seq = whole["history_seq"]
    assert whole["history_total"] == len(whole["history"]) >= 2 and "history_after" not in whole
    since = {"name": "plain", "version": 1, "history_of": "plain/1", "history_after": seq}
    again = httpx.get(f"{url}/v1/status", params=since).json()
    assert again["history"] == [] and again["history_after"] == seq == again["history_seq"]
    feedback_round(url, "plain", 900)
    after = httpx.get(f"{url}/v1/status", params=since).json()
    now = status_of(url, "plain")
    assert len(after["history"]) >= 1 and after["history_seq"] > seq
    assert (whole["history"] + after["history"])[-after["history_total"] :] == now["history"]
    # held for another model: the whole history of the one asked for
    other = httpx.get(f"{url}/v1/status", params={**since, "history_of": "toy/1"}).json()
    assert "history_after" not in other and other["history"] == now["history"]


def test_the_page_polls_for_new_snapshots_only_and_draws_them_all(folder_server, page):
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/v1/status" in r.url else None)
    show(page, folder_server.url, "plain")
    feedback_round(folder_server.url, "plain", 901)
    hist = status_of(folder_server.url, "plain")["history"]
    page.wait_for_function(f"Number(document.body.dataset.snapshots) === {len(hist)}")
    drawn = page.locator("#ts-rows circle.pt[data-series=served]").count()
    assert drawn == len(hist)
    assert any("history_after=" in u and "history_of=plain%2F1" in u for u in asked), asked
