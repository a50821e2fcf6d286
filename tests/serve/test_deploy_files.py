"""deploy/: the Kubernetes manifest parses and its probes name routes a real server answers
without the API key (as a kubelet asks), with the container's arguments; the Dockerfile installs
as the README says."""

from __future__ import annotations

from pathlib import Path

import httpx
import yaml

from tests.serve.conftest import API_KEY, start_server, stop_server

DEPLOY = Path(__file__).parents[2] / "deploy"


def _deployment() -> dict:
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "bayesify.yaml").read_text()))
    assert {d["kind"] for d in docs} == {"Secret", "Deployment", "Service"}
    return next(d for d in docs if d["kind"] == "Deployment")


def test_probes_are_the_v2_health_routes_of_a_real_server(toy_bundle, tmp_path):
    spec = _deployment()["spec"]
    assert spec["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
    container = spec["template"]["spec"]["containers"][0]
    ready, live = container["readinessProbe"]["httpGet"], container["livenessProbe"]["httpGet"]
    assert (ready["path"], live["path"]) == ("/v2/health/ready", "/v2/health/live")
    assert ready["port"] == live["port"] == container["ports"][0]["name"]
    args = container["args"]
    level = args[args.index("--drift-level") + 1]
    server = start_server(toy_bundle, tmp_path / "server.log", "--drift-level", level,
                          "--store", "memory", env={"BAYESIFY_API_KEY": API_KEY})  # fmt: skip
    try:
        for path in (ready["path"], live["path"]):
            assert httpx.get(server.url + path).status_code == 200, path
        assert httpx.get(server.url + "/metrics").status_code == 401  # the key guards it
        status = httpx.get(server.url + "/v1/status", headers={"X-API-Key": API_KEY}).json()
        rows = status["monitor"]["drift"]
        # the level is shared by the model's figures (error, NLL, ECE on all and accepted rows)
        assert len(rows) == 6 and {r["level"] for r in rows} == {float(level) / 6}
    finally:
        stop_server(server)


def test_the_container_installs_as_the_readme_says():
    readme = (DEPLOY.parent / "README.md").read_text()
    assert 'pip install -c constraints.txt -e ".[serve]"' in readme
    docker = (DEPLOY / "Dockerfile").read_text()
    assert 'pip install -c constraints.txt -e ".[${EXTRAS}]"' in docker
    assert "ARG EXTRAS=serve," in docker
