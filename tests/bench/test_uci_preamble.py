"""``bayesify bench uci --preamble FILE``: the file's relative links hold from the page."""

from __future__ import annotations

import re
from pathlib import Path

from bayesify.bench.preamble import read_preamble as _preamble


def test_relative_links_of_the_preamble_hold_from_the_page(tmp_path):
    runs = tmp_path / "benchmarks" / "uci" / "runs.md"
    runs.parent.mkdir(parents=True)
    (runs.parent / "store.jsonl.gz").write_bytes(b"")
    runs.write_text(
        "rows in [`uci/store.jsonl.gz`](store.jsonl.gz), the [page](../uci_gal2018.md#top), "
        "[Gal](https://github.com/yaringal), [below](#rows) and [abs](/x.md)\n"
    )
    text = _preamble(str(runs), str(tmp_path / "benchmarks" / "uci.md"))
    assert "(uci/store.jsonl.gz)" in text and "(uci_gal2018.md#top)" in text
    assert "(https://github.com/yaringal)" in text and "(#rows)" in text and "(/x.md)" in text
    page = tmp_path / "benchmarks" / "uci.md"
    assert (page.parent / "uci/store.jsonl.gz").is_file()
    # a page in the preamble's own folder keeps its links as they are
    assert _preamble(str(runs), str(runs.parent / "page.md")) == runs.read_text()
    assert _preamble("", str(page)) == ""


def test_the_committed_runs_preamble_links_resolve_from_uci_md():
    root = Path(__file__).resolve().parents[2] / "benchmarks"
    text = _preamble(str(root / "uci" / "runs.md"), str(root / "uci.md"))
    for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if not re.match(r"[a-z]+:", link):
            assert (root / link).exists(), link
