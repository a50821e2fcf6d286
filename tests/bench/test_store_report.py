"""`bayesify report STORE`: the HTML page opened in a real headless browser, the markdown file."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bayesify.bench.store import ResultsStore, RowKey
from bayesify.bench.summary import mean_se
from bayesify.cli import app

CHROMIUM = "/usr/bin/chromium"


def _fill(path: Path) -> None:
    store = ResultsStore(path)
    for method, base in (("mc-dropout", 1.0), ("ensemble", 0.5)):
        for lik in ("homoscedastic", "heteroscedastic"):
            for split in range(3):
                key = RowKey("toy", method, "yacht", split, 0, f"{lik[:4]}")
                config = {"likelihood": lik, "epochs": 40}
                store.claim(key, config)
                store.finish(key, {"rmse": base + split, "pll": -base - 0.1 * split,
                                   "curve": [1, 2, 3]}, 1.5, config)  # fmt: skip
    key = RowKey("toy", "bbb", "yacht", 0, 0, "x")
    store.claim(key, {"likelihood": "homoscedastic", "epochs": 40})
    store.fail(key, "Traceback ...\nValueError: bad thing", 0.2, {})
    store.add("other", "boston", 0, "MCBN", {"crps": 1.25})
    store.close()


def test_report_command_writes_html_and_markdown(tmp_path):
    db = tmp_path / "results.db"
    _fill(db)
    result = CliRunner().invoke(app, ["report", str(db), "--out", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.output
    md = (tmp_path / "rep" / "report.md").read_text()
    # rmse of mc-dropout, heteroscedastic over splits 0, 1, 2: 1, 2, 3
    m, se = mean_se([1.0, 2.0, 3.0])
    assert f"| yacht | mc-dropout (likelihood=heteroscedastic) | {m:.3f} ± {se:.3f} |" in md
    assert "ValueError: bad thing" in md and "1 failed" in md
    assert "| boston | MCBN | 1.250 | 1 |" in md
    figures = re.findall(r"!\[[^]]*\]\((figures/[^)]+)\)", md)
    assert len(figures) == 2 and all((tmp_path / "rep" / f).is_file() for f in figures)
    page = (tmp_path / "rep" / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "figures/" not in page


def test_report_of_a_missing_store_is_a_one_line_error(tmp_path):
    result = CliRunner().invoke(app, ["report", str(tmp_path / "nope.db")])
    assert result.exit_code == 2 and "no results store" in result.output


def test_html_renders_in_a_headless_browser(tmp_path):
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip(f"no chromium browser at {CHROMIUM} (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    db = tmp_path / "results.db"
    _fill(db)
    out = tmp_path / "rep"
    assert CliRunner().invoke(app, ["report", str(db), "--out", str(out)]).exit_code == 0
    (out / "figures").rename(tmp_path / "moved")  # the page must not need the PNG files
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto((out / "report.html").as_uri())
            page.wait_for_load_state("load")
            assert page.title() == "Results store results.db"
            tables = page.locator("table")
            assert tables.count() == 3  # toy results, toy failures, other results
            first = tables.filter(has_text="toy: mean")
            assert first.locator("thead th").all_inner_texts() == [
                "dataset", "method", "rmse", "pll", "rows"
            ]  # fmt: skip
            assert first.locator("tbody tr").count() == 4
            assert "bad thing" in tables.filter(has_text="toy: failed jobs").inner_text()
            widths = page.eval_on_selector_all(
                "img", "imgs => imgs.map(i => [i.complete, i.naturalWidth, i.naturalHeight])"
            )
            assert len(widths) == 2
            assert all(done and w > 0 and h > 0 for done, w, h in widths), widths
        finally:
            browser.close()
