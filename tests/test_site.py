"""The documentation site: an API reference entry for every public name, and the gallery hook
that fails the build when an example fails (the build itself runs in .ci/run)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

import bayesify

ROOT = Path(__file__).resolve().parents[1]


def _hook(name: str):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    spec = importlib.util.spec_from_file_location(
        f"docs_hooks_{name}", ROOT / "docs" / "hooks" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_api_reference_has_every_public_name():
    text = "\n".join(p.read_text() for p in sorted((ROOT / "docs" / "api").glob("*.md")))
    documented = set(re.findall(r"^::: bayesify\.(\w+)$", text, flags=re.M))
    assert documented == set(bayesify.__all__)


def test_every_example_has_a_title_text_and_code():
    gallery = _hook("gallery")
    examples = gallery.examples()
    assert len(examples) >= 7 and all(e.title and e.text and e.code.strip() for e in examples)


def test_a_failing_example_fails_the_build(tmp_path):
    gallery = _hook("gallery")
    from mkdocs.exceptions import PluginError

    script = tmp_path / "broken.py"
    script.write_text('"""# Broken\n\nRaises."""\n\nprint("before")\nraise SystemExit(3)\n')
    with pytest.raises(PluginError, match=r"broken\.py failed \(exit 3\)"):
        gallery.run_example(gallery.read_example(script))
    script.write_text('"""# Fine\n\nDraws."""\n\nprint("drawn")\nopen("a.png", "wb").write(b"x")\n')
    ran = gallery.run_example(gallery.read_example(script))
    assert ran.output == "drawn\n" and ran.figures == {"a.png": b"x"}
    assert f"![a.png]({script.stem}_a.png)" in gallery.example_page(ran)


# the README's sections before it became a front page, and the site page that now holds each
MOVED = {
    "Wrap your own trained batch-norm network (five lines)": "quickstart.md",
    "Your own data: a file in, predictions with uncertainty out": "quickstart.md",
    "One example per method": "quickstart.md",
    "Continual learning (VCL)": "quickstart.md",
    "scikit-learn": "quickstart.md",
    "The predictive distribution": "predictive.md",
    "Calibrated intervals and sets (conformal)": "predictive.md",
    "Command line": "cli.md",
    "Serving: answer fast, say when not to trust it": "serving.md",
    "One pass instead of T: distil a bundle": "serving.md",
    "Serve a folder of bundles": "serving.md",
    "Methods": "methods.md",
    "Layout": "methods.md",
    "More than one machine": "scaling.md",
    "Benchmarks on a cluster": "scaling.md",
    "Training across machines": "scaling.md",
    "Speed and memory": "scaling.md",
    "Benchmarks": "running-benchmarks.md",  # its title: Running the benchmarks
}


def test_readme_is_a_front_page_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    install_demo = (
        'python3 -m venv .venv && . .venv/bin/activate && pip install -c constraints.txt -e ".'
        '[search]" && bayesify demo'
    )
    install_test = (
        'python3 -m venv .venv && . .venv/bin/activate && pip install -c constraints.txt -e ".'
        '[test]" && pip install --no-deps -r requirements-reference.txt && python -m pytest -q '
        "-n 2 --dist loadfile"
    )
    assert install_demo in text and install_test in text
    # .ci/run runs the same test command (its extra flags: no cache, one torch thread each)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile" in ci
    for link in re.findall(r"\]\(((?:docs/)?[\w./-]+\.md)\)", text):
        assert (ROOT / link).is_file(), link


def test_sections_moved_from_the_readme_are_on_the_site():
    nav = (ROOT / "mkdocs.yml").read_text()
    for title, page in MOVED.items():
        text = (ROOT / "docs" / page).read_text()
        headings = {line.lstrip("#").strip() for line in text.splitlines() if line[:1] == "#"}
        assert title in headings or f"Running the {title.lower()}" in headings, (title, page)
        assert f": {page}" in nav, page


def test_site_is_browsable_offline():
    """File URLs, no web fonts, the offline plugin's search, and its Web Worker shim served
    from the site itself (the plugin would otherwise load it from unpkg.com)."""
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["use_directory_urls"] is False and config["theme"]["font"] is False
    assert "offline" in [p if isinstance(p, str) else next(iter(p)) for p in config["plugins"]]
    for shim in config["extra"]["polyfills"]:
        assert "iframe-worker" in shim and (ROOT / "docs" / shim).is_file()
