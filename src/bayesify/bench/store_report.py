"""A results store as a page for a person: one self-contained HTML file (figures embedded as
base64 PNG) and a markdown file with the same tables and figures (PNG files beside it).

Per experiment: how many rows are done, failed or were left running; a table of every scalar
metric as mean ± standard error over splits and seeds, one line per (dataset, method and the
configuration fields that vary within the experiment); a figure per dataset with a panel per
metric; and the failed jobs with the last line of their error.
"""

from __future__ import annotations

import base64
import html
import math
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bayesify.atomic import write_text
from bayesify.bench.store import DONE, FAILED, RUNNING, ResultsStore
from bayesify.bench.summary import mean_se

MAX_PANELS = 6  # metrics per dataset figure


@dataclass
class Table:
    """A table for both outputs: a title, column names and rows of cell strings."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.columns) + " |",
                 "|" + " --- |" * len(self.columns)]  # fmt: skip
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in self.rows]
        return "\n".join(lines)

    def html(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in self.rows
        )
        return (f"<table><caption>{html.escape(self.title)}</caption><thead><tr>{head}</tr>"
                f"</thead><tbody>{body}</tbody></table>")  # fmt: skip


@dataclass
class Figure:
    """A saved PNG and its caption."""

    path: Path
    caption: str


@dataclass
class Section:
    experiment: str
    summary: str
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)


def _scalar_metrics(rows: list[dict[str, Any]]) -> list[str]:
    """Metric names with a number in at least one row, in first-seen order."""
    names: dict[str, None] = {}
    for r in rows:
        for k, v in r["metrics"].items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                names.setdefault(k)
    return list(names)


def _varying_config(rows: list[dict[str, Any]]) -> list[str]:
    """Configuration fields whose value differs between rows (they name a line of the table)."""
    keys = sorted({k for r in rows for k in r["config"]})
    return [k for k in keys if len({repr(r["config"].get(k)) for r in rows}) > 1]


def _group_label(method: str, config: dict[str, Any], varying: list[str]) -> str:
    extra = ", ".join(f"{k}={config.get(k)}" for k in varying)
    return f"{method} ({extra})" if extra else method


def _fmt(m: float, se: float, n: int) -> str:
    digits = 3 if abs(m) < 100 else 1
    return f"{m:.{digits}f}" if n < 2 else f"{m:.{digits}f} ± {se:.{digits}f}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def experiment_section(store: ResultsStore, experiment: str, figures: Path) -> Section:
    """Tables and figures of one experiment (figures saved under ``figures``)."""
    everything = store.records(experiment, status=None)
    counts = {s: sum(r["status"] == s for r in everything) for s in (DONE, FAILED, RUNNING)}
    rows = [r for r in everything if r["status"] == DONE]
    seconds = [r["seconds"] for r in rows if r["seconds"] is not None]
    summary = (f"{counts[DONE]} rows done, {counts[FAILED]} failed, {counts[RUNNING]} left "
               f"running (killed or in progress)")  # fmt: skip
    if seconds:
        summary += f"; {sum(seconds):.0f} s of job time"
    section = Section(experiment, summary)
    metrics = _scalar_metrics(rows)
    varying = _varying_config(rows)
    cells: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    runs: dict[tuple[str, str], int] = defaultdict(int)
    for r in rows:
        group = (r["dataset"], _group_label(r["method"], r["config"], varying))
        runs[group] += 1
        for k in metrics:
            v = r["metrics"].get(k)
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                cells[group][k].append(float(v))
    if metrics:
        table = Table(f"{experiment}: mean ± standard error over splits and seeds",
                      ["dataset", "method", *metrics, "rows"])  # fmt: skip
        for group in sorted(runs):
            vals = [_fmt(*mean_se(c, single=0.0), len(c)) if (c := cells[group][k]) else "–"
                    for k in metrics]  # fmt: skip
            table.rows.append([*group, *vals, str(runs[group])])
        section.tables.append(table)
        for dataset in sorted({g[0] for g in runs}):
            groups = [g for g in sorted(runs) if g[0] == dataset]
            path = figures / f"{_slug(experiment)}__{_slug(dataset)}.png"
            _metric_figure(groups, cells, metrics[:MAX_PANELS], f"{experiment}: {dataset}", path)
            section.figures.append(Figure(path, f"{experiment} on {dataset}: mean ± s.e."))
    failed = [r for r in everything if r["status"] == FAILED]
    if failed:
        table = Table(f"{experiment}: failed jobs", ["dataset", "method", "split", "seed",
                                                     "attempts", "error"])  # fmt: skip
        for r in failed:
            last = (r["error"] or "").strip().splitlines()[-1:] or [""]
            table.rows.append([r["dataset"], r["method"], str(r["split"]), str(r["seed"]),
                               str(r["attempts"]), last[0]])  # fmt: skip
        section.tables.append(table)
    return section


def _metric_figure(
    groups: list[tuple[str, str]],
    cells: dict[tuple[str, str], dict[str, list[float]]],
    metrics: list[str],
    title: str,
    path: Path,
) -> None:
    """One panel per metric: each method's mean with a standard-error bar."""
    from bayesify.plots import new_figure, save_figure

    cols = min(3, len(metrics))
    nrows = math.ceil(len(metrics) / cols)
    fig, axes = new_figure(figsize=(3.3 * cols, 0.35 * len(groups) * nrows + 1.4 * nrows),
                           nrows=nrows, ncols=cols, squeeze=False)  # fmt: skip
    labels = [g[1] for g in groups]
    for i, ax in enumerate(axes.flat):
        if i >= len(metrics):
            ax.set_visible(False)
            continue
        k = metrics[i]
        for y, g in enumerate(groups):
            if cells[g][k]:
                m, se = mean_se(cells[g][k], single=0.0)
                ax.errorbar(m, y, xerr=se, fmt="o", color=f"C{y % 10}", capsize=3)
        ax.set_yticks(range(len(groups)))
        ax.set_yticklabels(labels if i % cols == 0 else [""] * len(labels), fontsize=7)
        ax.set_ylim(len(groups) - 0.5, -0.5)
        ax.set_title(k, fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path, dpi=80)


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.85em; }
caption { text-align: left; font-weight: 600; margin-bottom: 0.3em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:nth-child(-n+2), td:nth-child(-n+2) { text-align: left; }
figure { margin: 1em 0; } img { max-width: 100%; }
"""


def write_store_report(store: str | Path, out: str | Path) -> tuple[Path, Path]:
    """Write ``out/report.html`` (self-contained) and ``out/report.md`` (figures in
    ``out/figures/``) for every experiment of the store file ``store``; returns both paths."""
    store, out = Path(store), Path(out)
    if not store.is_file():
        raise FileNotFoundError(f"no results store at {store}")
    with ResultsStore(store) as db:
        sections = [experiment_section(db, e, out / "figures") for e in db.experiments()]
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    title = f"Results store {store.name}"
    md = [f"# {title}", "", f"`{store}`, read {stamp}.", ""]
    body = [f"<h1>{html.escape(title)}</h1>",
            f"<p><code>{html.escape(str(store))}</code>, read {stamp}.</p>"]  # fmt: skip
    if not sections:
        md.append("The store holds no rows.")
        body.append("<p>The store holds no rows.</p>")
    for s in sections:
        md += [f"## {s.experiment}", "", s.summary + ".", ""]
        body += [f"<h2>{html.escape(s.experiment)}</h2>", f"<p>{html.escape(s.summary)}.</p>"]
        for t in s.tables:
            md += [t.markdown(), ""]
            body.append(t.html())
        for f in s.figures:
            md += [f"![{f.caption}](figures/{f.path.name})", ""]
            data = base64.b64encode(f.path.read_bytes()).decode()
            body.append(f'<figure><img alt="{html.escape(f.caption)}" '
                        f'src="data:image/png;base64,{data}"><figcaption>'
                        f"{html.escape(f.caption)}</figcaption></figure>")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    md_path, html_path = out / "report.md", out / "report.html"
    write_text(md_path, "\n".join(md) + "\n")
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>'
            f"{html.escape(title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")  # fmt: skip
    write_text(html_path, page)
    return html_path, md_path
