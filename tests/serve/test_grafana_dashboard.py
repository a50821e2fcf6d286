"""deploy/grafana/bayesify.json: every panel's PromQL parses, and every metric it reads is one
the server exports (the families of :mod:`bayesify.serve.metrics`, as exposed: counters with
``_total``, histograms with ``_bucket``/``_sum``/``_count``); every family has a panel."""

from __future__ import annotations

import json
import re
from pathlib import Path

import promql_parser
import pytest
from prometheus_client import CollectorRegistry

from bayesify.serve import metrics, workers

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "bayesify.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
#: what Grafana puts in place of its variables before a query reaches Prometheus
GRAFANA = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "6h"}


def exposed(registry: CollectorRegistry) -> dict[str, str]:
    """Sample name -> family name of every family in ``registry``."""
    out = {}
    for family in registry.collect():
        for suffix in SUFFIXES[family.type]:
            out[family.name + suffix] = family.name
    return out


@pytest.fixture
def names(monkeypatch, tmp_path) -> dict[str, str]:
    """The names one process exports, and a worker's (``--workers N`` adds a family)."""
    out = exposed(metrics.MetricFamilies().registry)
    monkeypatch.setenv(workers.MULTIPROC_ENV, str(tmp_path))
    monkeypatch.setenv(workers.WORKER_ENV, "0/2:")
    return {**out, **exposed(metrics.MetricFamilies().registry)}


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every template variable's selector."""
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            inner = re.fullmatch(r"label_values\((.*), *\w+\)", var["query"]["query"])
            assert inner, var["query"]["query"]
            out.append((f"variable {var['name']}", inner.group(1)))
    return out


def selectors(expr: object) -> list[str]:
    """Metric names of the vector selectors in a parsed PromQL expression."""
    if isinstance(expr, promql_parser.VectorSelector):
        return [expr.name]
    found = []
    for attr in ("lhs", "rhs", "expr", "param", "vector_selector", "args"):
        child = getattr(expr, attr, None)
        for c in child if isinstance(child, list) else [child]:
            if c is not None:
                found += selectors(c)
    return found


def used(query: str) -> list[str]:
    for var, value in GRAFANA.items():
        query = query.replace(var, value)
    return selectors(promql_parser.parse(query))


def test_every_query_reads_metrics_the_server_exports(names):
    dashboard = json.loads(DASHBOARD.read_text())
    seen = set()
    for where, query in queries(dashboard):
        got = used(query)
        assert got, f"{where}: no metric in {query}"
        unknown = [n for n in got if n not in names]
        assert not unknown, f"{where}: {unknown} not exported (known: {sorted(names)})"
        seen |= {names[n] for n in got}
    assert seen == set(names.values()), f"families without a panel: {set(names.values()) - seen}"


def test_the_check_catches_a_misspelt_metric_and_broken_promql(names):
    assert used("rate(bayesify_request_total[5m])") == ["bayesify_request_total"]
    assert "bayesify_request_total" not in names  # the counter is bayesify_requests_total
    with pytest.raises(ValueError):
        used("sum by (model (rate(bayesify_requests_total[5m]))")


def test_panels_have_titles_units_and_one_datasource():
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    for p in panels:
        assert p["title"] and p["description"] and p["fieldConfig"]["defaults"]["unit"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
