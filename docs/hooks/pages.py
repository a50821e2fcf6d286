"""MkDocs hook: pages kept outside ``docs/`` served as part of the site, without copies.

``benchmarks/`` (the committed benchmark pages, their figures and data files) becomes the site's
``benchmarks/`` folder, and ``CHANGELOG.md`` its ``changelog.md``. The nav entry
``Benchmarks`` is filled with every benchmark page, titled by its first heading, so a page added
to ``benchmarks/`` is listed without editing ``mkdocs.yml``. Links written for the repository
(``../benchmarks/x.md`` from a page in ``docs/``, ``docs/x.md`` from the changelog) are
rewritten for the site.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
SERVED = {".md", ".png", ".svg", ".csv", ".jsonl", ".gz"}  # not stores, journals or scripts


def _title(page: Path) -> str:
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip().replace("`", "")
    return page.stem


def benchmark_pages() -> list[Path]:
    """Every benchmark page: the top-level ones, then those in sub-folders."""
    pages = sorted(BENCHMARKS.glob("*.md")) + sorted(BENCHMARKS.glob("*/**/*.md"))
    return [p for p in pages if p.is_file()]


def on_config(config: Any) -> Any:
    for entry in config.nav or []:
        if isinstance(entry, dict) and "Benchmarks" in entry:
            entry["Benchmarks"] = [
                {_title(p): f"benchmarks/{p.relative_to(BENCHMARKS).as_posix()}"}
                for p in benchmark_pages()
            ]
    return config


def on_files(files: Files, config: Any) -> Files:
    for path in sorted(BENCHMARKS.rglob("*")):
        if path.is_file() and path.suffix in SERVED:
            uri = f"benchmarks/{path.relative_to(BENCHMARKS).as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    files.append(File.generated(config, "changelog.md", abs_src_path=str(ROOT / "CHANGELOG.md")))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri == "changelog.md":  # CHANGELOG.md links docs/x.md from the root
        markdown = markdown.replace("](docs/", "](")
    elif "/" not in page.file.src_uri:  # a page at the top of docs/
        markdown = markdown.replace("](../benchmarks/", "](benchmarks/")
    return markdown
