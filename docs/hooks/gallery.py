"""MkDocs hook: the gallery of executed examples.

Every ``examples/*.py`` runs when the site is built, in a fresh Python process in an empty
folder (``MPLBACKEND=Agg``). Its page shows the module docstring (a ``# Title`` line, then
text), the code, what it printed and every ``.png`` it saved; the script itself is served beside
it. An example that fails or takes longer than ``TIMEOUT_S`` fails the build. The nav entry
``Examples`` is filled with the gallery, so an example added to ``examples/`` is listed without
editing ``mkdocs.yml``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TIMEOUT_S = 300  # each takes under a minute on a quiet CPU; the margin is for a loaded machine


@dataclass
class Example:
    """One script of the gallery: its parts and, once run, what it printed and drew."""

    path: Path
    title: str
    text: str
    code: str
    output: str = ""
    figures: dict[str, bytes] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return self.path.stem


def read_example(path: Path) -> Example:
    """Split a script into its docstring's title and text and the code after the docstring."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    doc = ast.get_docstring(tree)
    if not doc or not doc.startswith("# "):
        raise PluginError(f"{path.name}: the module docstring must start with '# Title'")
    title, _, text = doc.partition("\n")
    body = source.splitlines()[tree.body[0].end_lineno :]
    return Example(path, title[2:].strip(), text.strip(), "\n".join(body).strip() + "\n")


def run_example(example: Example, timeout: float = TIMEOUT_S) -> Example:
    """Run the script in an empty folder; keep its output and the figures it saved there."""
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix=f"gallery-{example.name}-") as tmp:
        start = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, str(example.path)],
                cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout,
            )  # fmt: skip
        except subprocess.TimeoutExpired as e:
            raise PluginError(f"example {example.path.name} took over {timeout:.0f} s") from e
        if done.returncode != 0:
            raise PluginError(
                f"example {example.path.name} failed (exit {done.returncode}):\n"
                f"{done.stderr[-4000:]}"
            )
        example.seconds = time.perf_counter() - start
        example.output = done.stdout
        example.figures = {p.name: p.read_bytes() for p in sorted(Path(tmp).glob("*.png"))}
    return example


def example_page(example: Example) -> str:
    """The gallery page of a run example (markdown)."""
    parts = [f"# {example.title}\n", example.text + "\n" if example.text else ""]
    parts.append(f"[Download {example.path.name}]({example.path.name}) · ran in "
                 f"{example.seconds:.1f} s when this site was built.\n")  # fmt: skip
    parts.append(f"```python\n{example.code}```\n")
    if example.output.strip():
        parts.append(f"Output:\n\n```text\n{example.output.rstrip()}\n```\n")
    parts += [f"![{name}]({example.name}_{name})\n" for name in example.figures]
    return "\n".join(p for p in parts if p)


def index_page(examples: list[Example]) -> str:
    lines = [
        "# Examples\n",
        "Each example runs when this site is built, on the CPU, in well under a minute, and its "
        "page shows what it printed and drew. Run one yourself with `python examples/NAME.py` "
        "from the repository root (it writes its figures to the current folder).\n",
    ]
    lines += [f"- [{e.title}]({e.name}.md): {e.text.split(chr(10) + chr(10))[0]}"
              for e in examples]  # fmt: skip
    return "\n".join(lines) + "\n"


def examples() -> list[Example]:
    return [read_example(p) for p in sorted(EXAMPLES.glob("*.py"))]


def on_config(config: Any) -> Any:
    for entry in config.nav or []:
        if isinstance(entry, dict) and "Examples" in entry:
            entry["Examples"] = ["examples/index.md"] + [
                {e.title: f"examples/{e.name}.md"} for e in examples()
            ]
    return config


def on_files(files: Files, config: Any) -> Files:
    with ThreadPoolExecutor(max_workers=2) as pool:  # each run is its own process
        ran = list(pool.map(run_example, examples()))
    files.append(File.generated(config, "examples/index.md", content=index_page(ran)))
    for e in ran:
        files.append(File.generated(config, f"examples/{e.name}.md", content=example_page(e)))
        files.append(File.generated(config, f"examples/{e.path.name}", abs_src_path=str(e.path)))
        for name, data in e.figures.items():
            files.append(File.generated(config, f"examples/{e.name}_{name}", content=data))
    return files
